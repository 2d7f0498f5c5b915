package routing

import "strings"

// Families is a set of command families: what a key's clients do with it.
// The data plane reports, per key, the families of the commands its
// clients sent (routing/command.Info.FamilyOf gives each command exactly
// one); node agents and the manager OR them over their window; the manager
// chooses only moves that serve every family seen (Served). The bits
// travel in the counts datagram and the agent summary: never renumber one.
type Families uint32

const (
	// FamStringRead: GET, MGET, STRLEN, GETEX without options.
	FamStringRead Families = 1 << iota
	// FamStringWrite: SET, SETNX, SETEX, PSETEX (without GET), MSET.
	FamStringWrite
	// FamCounter: INCR, DECR, INCRBY, DECRBY.
	FamCounter
	// FamKey: commands on any key whatever its type: DEL, UNLINK, EXISTS,
	// TYPE.
	FamKey
	// FamHashRead; FamHashWrite (HSET, HSETNX, HMSET, the field-expiry
	// writes...); FamHashCounter, the field updates a member split serves
	// exactly: HINCRBY and HDEL (named for the first; the names travel and
	// are shown, so it keeps it). HDEL was in FamHashWrite before the
	// engine served it: an older sidecar still reports it there, which
	// keeps a hash its clients delete fields of from a split it would
	// refuse HDEL under.
	FamHashRead
	FamHashWrite
	FamHashCounter
	// FamSetRead, FamSetWrite: sets.
	FamSetRead
	FamSetWrite
	// FamZSetRead, FamZSetWrite: sorted sets (and geo indexes, which are
	// sorted sets). FamZSetWrite is the writes a member split serves:
	// ZINCRBY, ZADD INCR of one member, ZREM (which was in FamZSetOther
	// before the engine served it: an older sidecar still reports it there,
	// keeping such a key from a split it would refuse ZREM under).
	FamZSetRead
	FamZSetWrite
	// FamOrdered: lists and streams, whose order is their meaning (a
	// queue): never spread over physical keys.
	FamOrdered
	// FamScript: EVAL, EVALSHA, FCALL and their read-only forms: a script
	// touches its keys inside Redis, out of the data plane's sight.
	FamScript
	// FamTTL: EXPIRE family, TTL family, PERSIST.
	FamTTL
	// FamOther: every other command naming the key (APPEND, GETRANGE,
	// SETBIT, GETSET, INCRBYFLOAT, PFADD, RENAME, WATCH, SET ... GET,
	// GETEX with options...).
	FamOther
	// FamTx: a command of the key was sent inside MULTI, where the engine
	// cannot take part (it refuses whatever it would serve itself).
	FamTx
	// FamUnknown: a reporter that does not report families (a sidecar or
	// node agent of an older version) counted the key: what its clients
	// send is unknown, so only moves that refuse nothing are safe.
	FamUnknown
	// FamHashOther: the hash commands a member split cannot serve exactly
	// (HINCRBYFLOAT, whose sum over shards rounds differently from one
	// key's; HRANDFIELD, HSCAN; the field-expiry reads), apart from
	// FamHashRead and FamHashCounter so that a key whose clients send only
	// those can be split by member.
	FamHashOther
	// FamZSetOther, FamSetOther: the sorted-set and set commands a member
	// split cannot serve exactly (pops, removals by range, plain ZADD,
	// ranges by score or lex, random and cursor reads, multi-key and store
	// forms, geo), apart
	// from FamZSetRead/FamZSetWrite and FamSetRead/FamSetWrite so that a
	// key whose clients send only ZINCRBY and rank reads (a leaderboard),
	// or SADD and membership reads (a flag set), can be split by member.
	FamZSetOther
	FamSetOther

	famEnd
)

// FamilyBits is the count of family bits: FamAll is 1<<FamilyBits - 1.
const FamilyBits = 20

// FamAll is every family.
const FamAll = famEnd - 1

// The moves' served sets, by how a move changes where the key's data lives
// (dataplane/engine.Class). A move serves a family when the data plane
// refuses none of its commands on a key the move mitigates; the engine's
// Classify is tested against these sets command by command
// (TestServedMatchesClassify in dataplane/engine), so they cannot drift.
const (
	// ServedRaw: coalesce, local cache, replica reads and shed leave the
	// base key the whole truth: any command may go to Redis raw.
	ServedRaw = FamAll
	// ServedReplicate: the engine serves string reads and writes and
	// counters on the base key and its copies, and sends raw the commands
	// the table marks typed (the copies hold only strings); TTL, scripts,
	// other string writes, transactions and the multi-key commands of
	// sorted sets, sets and lists (ZUNION, SMOVE, LMOVE...) are refused.
	ServedReplicate = FamStringRead | FamStringWrite | FamCounter | FamKey |
		FamHashRead | FamHashWrite | FamHashCounter | FamHashOther | FamSetRead | FamSetWrite |
		FamZSetRead | FamZSetWrite
	// ServedCounter: split and pre-aggregate spread a string counter over
	// shards: only the string commands the engine implements exactly, and
	// the expiry commands (every shard carries the key's expiry), so that
	// a rate limiter's INCR + EXPIRE can be split.
	ServedCounter = FamStringRead | FamStringWrite | FamCounter | FamKey | FamTTL
	// ServedMembers: a member split (Split.Members) spreads a hash of
	// counters over shards by field: HINCRBY goes to its field's shard and
	// every value is the sum of its places (docs/engine.md, Member split),
	// which is exact only while nothing but HINCRBY writes the fields. So
	// it serves the hash reads (point reads of one field's places, merged
	// whole-hash reads), HINCRBY and HDEL (which removes the field from
	// every place), and refuses every other hash write (plain HSET,
	// FamHashWrite). Like a split counter it serves the
	// key's commands (DEL, UNLINK, EXISTS, TYPE: every place is the key)
	// and the expiry commands (every place carries the key's expiry,
	// dataplane/engine/expire.go), so a hash given a TTL can be split.
	ServedMembers = FamHashRead | FamHashCounter | memberKeyFamilies
	// ServedZSetMembers: a sorted set split by member (Split.Kind
	// KindZSet) holds a member's score as the sum of its places, like a
	// hash field: ZINCRBY (and ZADD INCR of one member) adds to one place;
	// ZREM removes the member from every place;
	// ZSCORE/ZMSCORE sum a member's places; ZRANGE/ZREVRANGE by rank,
	// ZRANK/ZREVRANK and ZCARD merge the places (a top-N exactly).
	// Everything else of sorted sets (FamZSetOther) is refused; the key
	// and expiry commands are served as for a hash.
	ServedZSetMembers = FamZSetRead | FamZSetWrite | memberKeyFamilies
	// ServedSetMembers: a set split by member (Split.Kind KindSet): a
	// member is in the set when some place holds it; SADD adds to one
	// place; SREM removes from every place (guarded against a fold in
	// flight as DEL is); SISMEMBER/SMISMEMBER read a member's places,
	// SMEMBERS and SCARD merge them. SPOP and SMOVE (a removal and a
	// reply that must be one step) are FamSetOther and refused; the key
	// and expiry commands are served as for a hash.
	ServedSetMembers = FamSetRead | FamSetWrite | memberKeyFamilies

	// memberKeyFamilies are the whole-key commands every member split
	// serves: DEL/UNLINK remove every place, EXISTS/TYPE ask whether any
	// holds the key, and the expiry commands keep one expiry on all.
	memberKeyFamilies = FamKey | FamTTL
)

// RelievedReads are the families whose reads the read moves (coalesce,
// local cache, replica reads) relieve: the engine answers GET and MGET,
// and every other read-only, deterministic one-key read of any type
// (routing/command.Info.Cacheable: HGETALL, SISMEMBER, ZRANGE, LRANGE,
// XRANGE, TYPE, EXPIRETIME, GETRANGE...) itself, by the whole request
// (TestRelievedReadsMatchClassify in dataplane/engine). Random, cursor,
// blocking, script and remaining-time reads (SRANDMEMBER, HSCAN, BLPOP,
// EVAL_RO, TTL) still go to Redis raw; replicate, whose copies hold
// strings only, relieves string reads alone. FamHashOther holds the
// field-expiry reads (HEXPIRETIME...), deterministic and so cacheable,
// beside HRANDFIELD and HSCAN, which are not.
const RelievedReads = FamStringRead | FamKey | FamHashRead | FamSetRead | FamZSetRead | FamOrdered | FamTTL | FamOther | FamHashOther |
	FamZSetOther

// ServedBy is the families an entry's mitigation serves (ServedRaw for nil:
// a key that left the table is served raw).
func ServedBy(e *Entry) Families {
	switch {
	case e == nil:
		return ServedRaw
	case e.Split != nil && e.Split.Members:
		return ServedMembersOf(e.Split.Kind)
	case e.Split != nil || e.PreAggregate != nil:
		return ServedCounter
	case e.Replicate != nil:
		return ServedReplicate
	}
	return ServedRaw
}

// Names and FamilyBits must cover every bit.
var _ = [1]struct{}{}[famEnd-1<<FamilyBits]
var _ = [1]struct{}{}[len(familyNames)-FamilyBits]

// Known reports whether f says what the key's clients send: no reporter
// left it unknown. None (0) is known: no command of the key was seen in
// the window (a key that cools down), so no move can refuse one.
func (f Families) Known() bool { return f&FamUnknown == 0 }

// Has reports whether f holds every family of g.
func (f Families) Has(g Families) bool { return f&g == g }

var familyNames = [...]string{
	"string-read", "string-write", "counter", "key",
	"hash-read", "hash-write", "hash-counter",
	"set-read", "set-write", "zset-read", "zset-write",
	"list/stream", "script", "ttl", "other", "multi", "unknown",
	"hash-other", "zset-other", "set-other",
}

// ServedMembersOf is what a member split of kind k serves.
func ServedMembersOf(k MemberKind) Families {
	switch k {
	case KindZSet:
		return ServedZSetMembers
	case KindSet:
		return ServedSetMembers
	}
	return ServedMembers
}

// Names lists f's families by name, in bit order.
func (f Families) Names() []string {
	var out []string
	for i, n := range familyNames {
		if f&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// String is f's names joined by ",", "" for none.
func (f Families) String() string { return strings.Join(f.Names(), ",") }

// ParseFamilies reads String's form; unknown names are ignored (a newer
// writer's families).
func ParseFamilies(s string) Families {
	var f Families
	for _, n := range strings.Split(s, ",") {
		for i, name := range familyNames {
			if n == name {
				f |= 1 << i
			}
		}
	}
	return f
}
