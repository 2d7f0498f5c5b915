package fold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/heatsink-dev/heatsink/routing"
)

// Member shards. A shard of a member split (routing.Split.Members) is a
// hash whose fields hold increments (HINCRBY) of the same fields of the
// base key K. It is folded field by field with the protocol of the package
// doc, each move (+v on field f of K, −v on field f of S) tied to one
// sequence number of S:
//
//  1. read S's fields (HGETALL);
//  2. per field f holding v, on K's node (one script): unless the ledger
//     holds a pending record for S, HINCRBY K f v and record ("h", v, n, f);
//  3. on S's node (one script): unless S's ack key holds n or more,
//     HINCRBY S f −v, and HDEL S f when that leaves 0; SET the ack key n;
//  4. clear the record.
//
// The argument of the package doc holds move by move: the credit cannot
// be applied twice while its record is pending, the debit not twice past
// the ack key. A field's value, the sum of its places, is conserved at
// every step boundary, and so is its existence: between credit and debit
// both K and S hold it, and the debit deletes S's field only when it
// holds 0 and K holds the field (the credit created it, if only with 0). A
// late HINCRBY after the read stays in S (the debit subtracts only v) and
// is folded in a later round. A shard is folded when it holds no field.
//
// A shard of a sorted set split by member (Split.Kind "zset") is folded
// the same way with scores: ZRANGE 0 -1 WITHSCORES reads it, the credit
// is ZINCRBY K m v, the debit ZINCRBY S m −v and ZREM S m when that
// leaves 0, and the record is ("z", v, n, m). A score read from Redis
// (%.17g) parses back to the same double, so the debit of an untouched
// member leaves exactly 0. A member's score, the sum of its places, is
// conserved at every step boundary as a field's value is — exactly while
// the scores are integers below 2^53 (docs/engine.md).
//
// A shard of a set split by member (Split.Kind "set") needs no ledger: per
// member m, SADD K m, then SREM S m. Adding is idempotent, so a folder
// that dies and replays a move changes nothing, and m is in K before it
// leaves S: membership holds at every step. A late SADD to S after SADD K
// m is removed with it, and m stays in the set through K.
//
// Folder.Split folds a generation as the table's split says; a pending
// record says which kind of move it is by its "h" or "z" prefix, so a
// folder resumes any.

// creditMember is step 2 for one field or member. KEYS: K, ledger, seq
// key of S. ARGV: S, v, field, kind ("h" or "z").
var creditMember = newScript(`
local p = redis.call('HGET', KEYS[2], ARGV[1])
if p then return p end
if ARGV[4] == 'z' then
  redis.call('ZINCRBY', KEYS[1], ARGV[2], ARGV[3])
else
  redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[2])
end
local f = 'seq:' .. ARGV[1]
local n = redis.call('HINCRBY', KEYS[2], f, 1)
if n == 1 then
  local retired = tonumber(redis.call('GET', KEYS[3]) or '0')
  if retired > 0 then
    n = retired + 1
    redis.call('HSET', KEYS[2], f, n)
  end
end
local rec = ARGV[4] .. ' ' .. ARGV[2] .. ' ' .. n .. ' ' .. ARGV[3]
redis.call('HSET', KEYS[2], ARGV[1], rec)
return rec
`)

// debitMember is step 3 for one field or member. KEYS: S, its ack key.
// ARGV: −v (negated in Go: Lua would print −0 as "-0", which HINCRBY
// refuses), n, field, kind.
var debitMember = newScript(`
local a = tonumber(redis.call('GET', KEYS[2]) or '0')
if a >= tonumber(ARGV[2]) then return 0 end
if ARGV[4] == 'z' then
  local left = tonumber(redis.call('ZINCRBY', KEYS[1], ARGV[1], ARGV[3]))
  if left == 0 then redis.call('ZREM', KEYS[1], ARGV[3]) end
else
  local left = redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[1])
  if left == 0 then redis.call('HDEL', KEYS[1], ARGV[3]) end
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
`)

// memberRecord is a pending member move: "h v n field" (a hash's field,
// v an integer) or "z v n member" (a sorted set's member, v a score).
type memberRecord struct {
	kind  string
	v     string
	neg   string // −v as the debit sends it
	n     int64
	field string
	moved int64 // v for Result.Moved (a score truncated)
}

func isMemberRecord(rec string) bool {
	return strings.HasPrefix(rec, "h ") || strings.HasPrefix(rec, "z ")
}

func parseMemberRecord(rec string) (memberRecord, error) {
	parts := strings.SplitN(rec, " ", 4)
	var r memberRecord
	bad := fmt.Errorf("fold: malformed member ledger record of %d bytes", len(rec))
	if len(parts) != 4 || parts[0] != "h" && parts[0] != "z" {
		return r, bad
	}
	var err error
	if r.n, err = strconv.ParseInt(parts[2], 10, 64); err != nil || r.n <= 0 {
		return r, bad
	}
	r.kind, r.v, r.field = parts[0], parts[1], parts[3]
	if r.kind == "h" {
		v, err := strconv.ParseInt(r.v, 10, 64)
		if err != nil {
			return r, bad
		}
		r.neg, r.moved = strconv.FormatInt(-v, 10), v
		return r, nil
	}
	v, err := strconv.ParseFloat(r.v, 64)
	if err != nil {
		return r, bad
	}
	r.neg, r.moved = strconv.FormatFloat(-v, 'g', 17, 64), int64(v)
	return r, nil
}

// memberVal is one field or member of a shard and its value as Redis
// printed it (a set's members have none).
type memberVal struct{ name, v string }

// readMembers reads a member shard whole.
func (f *Folder) readMembers(ctx context.Context, shard string, kind routing.MemberKind) ([]memberVal, error) {
	var out []memberVal
	switch kind {
	case routing.KindZSet:
		zs, err := f.client.ZRangeWithScores(ctx, shard, 0, -1).Result()
		if err != nil {
			return nil, err
		}
		for _, z := range zs {
			out = append(out, memberVal{z.Member.(string), strconv.FormatFloat(z.Score, 'g', 17, 64)})
		}
	case routing.KindSet:
		ms, err := f.client.SMembers(ctx, shard).Result()
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			out = append(out, memberVal{name: m})
		}
	default:
		fields, err := f.client.HGetAll(ctx, shard).Result()
		if err != nil {
			return nil, err
		}
		for k, v := range fields {
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				return nil, errors.New("fold: a member shard's field does not hold an integer")
			}
			out = append(out, memberVal{k, v})
		}
	}
	return out, nil
}

// memberShard folds one member shard of kind; zero reports that it held
// no member with nothing pending.
func (f *Folder) memberShard(ctx context.Context, key, shard string, kind routing.MemberKind, res *Result) (bool, error) {
	ledger := routing.SameSlotKey(key, "fold")
	tag := "h"
	if kind == routing.KindZSet {
		tag = "z"
	}
	for range f.opts.Rounds {
		if err := f.fault(StepRead); err != nil {
			return false, err
		}
		members, err := f.readMembers(ctx, shard, kind)
		if err != nil {
			return false, fmt.Errorf("fold: read member shard: %w", err)
		}
		if len(members) == 0 {
			return true, nil
		}
		for _, m := range members {
			if err := f.fault(StepCredit); err != nil {
				return false, err
			}
			if kind == routing.KindSet {
				if err := f.moveSetMember(ctx, key, shard, m.name, res); err != nil {
					return false, err
				}
				continue
			}
			rec, err := creditMember.run(ctx, f.client, []string{key, ledger, seqKey(key, shard)}, shard, m.v, m.name, tag).Text()
			if err != nil {
				return false, fmt.Errorf("fold: credit base key: %w", err)
			}
			// rec is ours, or a move another folder left pending: finish
			// it either way; the member is read again next round.
			if err := f.finishAny(ctx, ledger, shard, rec, res); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// moveSetMember adds m to the base key, then removes it from the shard
// (each idempotent: a replay changes nothing).
func (f *Folder) moveSetMember(ctx context.Context, key, shard, m string, res *Result) error {
	if err := f.client.SAdd(ctx, key, m).Err(); err != nil {
		return fmt.Errorf("fold: credit base key: %w", err)
	}
	if err := f.fault(StepDebit); err != nil {
		return err
	}
	if err := f.client.SRem(ctx, shard, m).Err(); err != nil {
		return fmt.Errorf("fold: debit member shard: %w", err)
	}
	res.Moves++
	res.Moved++
	return nil
}

// finishMember applies steps 3 and 4 of a pending member record.
func (f *Folder) finishMember(ctx context.Context, ledger, shard, rec string, res *Result) error {
	r, err := parseMemberRecord(rec)
	if err != nil {
		return err
	}
	if err := f.fault(StepDebit); err != nil {
		return err
	}
	ack := routing.SameSlotKey(shard, "foldack")
	if err := debitMember.run(ctx, f.client, []string{shard, ack}, r.neg, r.n, r.field, r.kind).Err(); err != nil {
		return fmt.Errorf("fold: debit member shard: %w", err)
	}
	if err := f.fault(StepClear); err != nil {
		return err
	}
	if err := clearRecord.run(ctx, f.client, []string{ledger}, shard, rec).Err(); err != nil {
		return fmt.Errorf("fold: clear ledger: %w", err)
	}
	res.Moves++
	res.Moved += r.moved
	return nil
}

// finishAny finishes a pending record of either kind.
func (f *Folder) finishAny(ctx context.Context, ledger, shard, rec string, res *Result) error {
	if isMemberRecord(rec) {
		return f.finishMember(ctx, ledger, shard, rec, res)
	}
	return f.finish(ctx, ledger, shard, rec, res)
}
