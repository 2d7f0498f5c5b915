package routing

import (
	"strconv"
)

// Physical key naming.
//
// A replica or shard of logical key K is stored under a physical key of the
// form
//
//	{<tag>}hs:<kind>:<generation>:<index>:<K>
//
// where kind is "r" (replica) or "s" (shard), generation is the split
// generation's FromEpoch (0 for replicas) and index counts from 0. The
// leading hash tag decides the Redis Cluster slot (Redis hashes the first
// {...} of a key), so K's own hash tag, if any, has no say: the physical keys
// of one logical key spread however K is tagged.
//
// The tags are chosen so that the n physical keys of a set land on n slots
// spread evenly around the slot ring, starting at a slot derived from K:
// index i goes to slot (start + i*16384/n) mod 16384. Clusters assign slots in
// contiguous ranges, so evenly spaced slots spread over the masters. Every
// process computes the same names from the same inputs; nothing is stored.
//
// Auxiliary keys that must share the base key's slot (for atomic scripts on
// the base key, such as fold ledgers) use SameSlotKey.

// ReplicaKey is the physical key of replica i (0 <= i < n) of key.
func ReplicaKey(key string, i, n int) string {
	return physical(key, "r", 0, i, n)
}

// ShardKey is the physical key of shard i (0 <= i < n) of generation gen of
// key.
func ShardKey(key string, gen int64, i, n int) string {
	return physical(key, "s", gen, i, n)
}

// ShardKeys lists every shard key of a generation.
func ShardKeys(key string, gen Generation) []string {
	out := make([]string, gen.Shards)
	for i := range out {
		out[i] = ShardKey(key, gen.FromEpoch, i, int(gen.Shards))
	}
	return out
}

// ReplicaKeys lists every replica key of key for n replicas.
func ReplicaKeys(key string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = ReplicaKey(key, i, n)
	}
	return out
}

func physical(key, kind string, gen int64, i, n int) string {
	start := int(Slot(key))
	// Offset by the kind and generation so replicas and the shards of
	// successive generations do not all pile on the same slots.
	start += int(crc16(kind+strconv.FormatInt(gen, 10))) % SlotCount
	slot := (start + i*SlotCount/n + 1) % SlotCount
	b := make([]byte, 0, len(key)+32)
	b = append(b, '{')
	b = append(b, slotTag(slot)...)
	b = append(b, "}hs:"...)
	b = append(b, kind...)
	b = append(b, ':')
	b = strconv.AppendInt(b, gen, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, ':')
	b = append(b, key...)
	return string(b)
}

// SameSlotKey returns an auxiliary key that hashes to the same cluster slot as
// key, for scripts that must touch both atomically.
func SameSlotKey(key, suffix string) string {
	return "{" + slotTag(int(Slot(key))) + "}hs:aux:" + suffix + ":" + key
}

// FoldLedgerKey is the fold ledger of a split key K (package
// controllers/fold): a hash in K's slot holding the pending moves of its
// folds and, in field LedgerDeleted, how many times a member split's K was
// deleted (DEL, UNLINK), which the engine bumps in one transaction with the
// deletion of K so that a fold that read a shard before the deletion does
// not credit K after it.
func FoldLedgerKey(key string) string { return SameSlotKey(key, "fold") }

// LedgerDeleted is the field of FoldLedgerKey that counts deletions.
const LedgerDeleted = "deleted"

// RemovalMarkKey is the removal mark of a member split's place (K or a
// shard): a short-lived string in the place's slot that the engine sets to
// a new value after it removes members from the place (HDEL, SREM, DEL).
// An engine that caches the sum of a member's other places (the reply of
// HINCRBY and ZINCRBY adds it) reads its write place's mark with every
// write and drops the sum when the mark is not the one it read with it,
// so a removal made by another process is not added back into a reply.
func RemovalMarkKey(place string) string { return SameSlotKey(place, "removed") }

// MemberShard is the shard (0 <= i < n) that holds member (a hash field)
// of a member split of n shards: every process places a member alike, so
// a member's writes in one generation all reach one shard, and a point
// read touches one shard per generation. FNV-1a, not the slot hash, so
// that members spread over shards independently of how the shards spread
// over slots.
func MemberShard(member string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(member); i++ {
		h ^= uint32(member[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
