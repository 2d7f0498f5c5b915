package fold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

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
// A shard of a set split by member (Split.Kind "set") needs no pending
// record: per member m, SADD K m, then SREM S m. Adding is idempotent, so
// a folder that dies and replays a move changes nothing, and m is in K
// before it leaves S: membership holds at every step. A late SADD to S
// after SADD K m is removed with it, and m stays in the set through K.
// Each move is numbered and recorded on both sides as the others are, for
// readers (creditSetMember, debitSetMember).
//
// Folder.Split folds a generation as the table's split says; a pending
// record says which kind of move it is by its "h" or "z" prefix, so a
// folder resumes any.

// creditMember is step 2 for one field or member. KEYS: K, ledger, seq
// key of S. ARGV: S, v, field, kind ("h" or "z"), the shard's PEXPIRETIME
// at step 1 (-1: none), the ledger's deletion count at step 1, the
// ledger's field of that count (routing.LedgerDeleted). It returns
// the record, or "" when K was deleted since step 1 (nothing moved: the
// member read was deleted with S). When K is gone and the shard had an
// expiry, K is created with it (PEXPIREAT, which deletes K at once if it
// has passed): the member expired with the key, as a counter's value does.
var creditMember = newScript(`
local p = redis.call('HGET', KEYS[2], ARGV[1])
if p then return p end
if (redis.call('HGET', KEYS[2], ARGV[7]) or '0') ~= ARGV[6] then return '' end
local at = tonumber(ARGV[5])
local gone = at > 0 and redis.call('PEXPIRETIME', KEYS[1]) == -2
if ARGV[4] == 'z' then
  redis.call('ZINCRBY', KEYS[1], ARGV[2], ARGV[3])
else
  redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[2])
end
if gone then redis.call('PEXPIREAT', KEYS[1], at) end
` + nextMoveLua("ARGV[1]") + `
local rec = ARGV[4] .. ' ' .. ARGV[2] .. ' ' .. n .. ' ' .. ARGV[3]
redis.call('HSET', KEYS[2], ARGV[1], rec, 'last:' .. ARGV[1], rec)
return rec
`)

// creditSetMember is a set's step 2: SADD K m, unless K was deleted since
// step 1 (ARGV[3], the ledger's deletion count then; reply ""), creating K
// with the shard's expiry (ARGV[2]) when it is gone, as creditMember does.
// The move takes the shard's next sequence number n and its record
// "s 1 n m" goes to the ledger's last:S, as a counter's does, for readers
// (routing.ReconcileFold); no record is pending, since a set's move needs
// none to be applied once (both steps are idempotent). KEYS: K, ledger,
// seq key of S. ARGV: m, PEXPIRETIME of S at step 1, deletion count, its
// field (routing.LedgerDeleted), S.
var creditSetMember = newScript(`
if (redis.call('HGET', KEYS[2], ARGV[4]) or '0') ~= ARGV[3] then return '' end
local at = tonumber(ARGV[2])
local gone = at > 0 and redis.call('PEXPIRETIME', KEYS[1]) == -2
redis.call('SADD', KEYS[1], ARGV[1])
if gone then redis.call('PEXPIREAT', KEYS[1], at) end
` + nextMoveLua("ARGV[5]") + `
local rec = 's 1 ' .. n .. ' ' .. ARGV[1]
redis.call('HSET', KEYS[2], 'last:' .. ARGV[5], rec)
return rec
`)

// debitSetMember is a set's step 3: SREM S m, and the move's number and
// record (ARGV[2], ARGV[3]) in S's ack key and debit record key, unless
// the ack key holds n or more already (a later move of S was debited: m,
// left in S, is moved again in a later round). KEYS: S, ack key, debit
// record key.
var debitSetMember = newScript(`
local a = tonumber(redis.call('GET', KEYS[2]) or '0')
if a >= tonumber(ARGV[2]) then return 0 end
local r = redis.call('SREM', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
local applied = '0'
if r == 1 then applied = '1' end
redis.call('SET', KEYS[3], applied .. ' ' .. ARGV[3])
return 1
`)

// readMemberShard is step 1 for a member shard: its members (HGETALL,
// ZRANGE 0 -1 WITHSCORES or SMEMBERS by ARGV[1], "h", "z" or "s") and its
// PEXPIRETIME, read together.
var readMemberShard = newScript(`
local r
if ARGV[1] == 'z' then
  r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
elseif ARGV[1] == 's' then
  r = redis.call('SMEMBERS', KEYS[1])
else
  r = redis.call('HGETALL', KEYS[1])
end
return {r, redis.call('PEXPIRETIME', KEYS[1])}
`)

// debitMember is step 3 for one field or member. KEYS: S, its ack key,
// its debit record key. ARGV: −v (negated in Go: Lua would print −0 as
// "-0", which HINCRBY refuses), n, field, kind, the move's record. A field
// or member S no longer holds was removed with S since step 1 (it expired,
// or DEL deleted the key): it is not re-created at −v, and the debit
// record says so (as debit's does).
var debitMember = newScript(`
local a = tonumber(redis.call('GET', KEYS[2]) or '0')
if a >= tonumber(ARGV[2]) then return 0 end
local applied = '0'
if ARGV[4] == 'z' then
  if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
    local left = tonumber(redis.call('ZINCRBY', KEYS[1], ARGV[1], ARGV[3]))
    if left == 0 then redis.call('ZREM', KEYS[1], ARGV[3]) end
    applied = '1'
  end
elseif redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
  local left = redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[1])
  if left == 0 then redis.call('HDEL', KEYS[1], ARGV[3]) end
  applied = '1'
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], applied .. ' ' .. ARGV[5])
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
	var r memberRecord
	m, err := routing.ParseFoldRecord(rec)
	if err != nil || m.Kind != 'h' && m.Kind != 'z' {
		return r, fmt.Errorf("fold: malformed member ledger record of %d bytes", len(rec))
	}
	r.kind, r.v, r.n, r.field = string(m.Kind), m.V, m.N, m.Field
	// ParseFoldRecord checked that v parses.
	if r.kind == "h" {
		v, _ := strconv.ParseInt(r.v, 10, 64)
		r.neg, r.moved = strconv.FormatInt(-v, 10), v
		return r, nil
	}
	v, _ := strconv.ParseFloat(r.v, 64)
	r.neg, r.moved = strconv.FormatFloat(-v, 'g', 17, 64), int64(v)
	return r, nil
}

// memberVal is one field or member of a shard and its value as Redis
// printed it (a set's members have none).
type memberVal struct{ name, v string }

// readMembers reads a member shard whole, with its PEXPIRETIME (-1:
// none).
func (f *Folder) readMembers(ctx context.Context, shard string, kind routing.MemberKind) ([]memberVal, int64, error) {
	tag := "h"
	switch kind {
	case routing.KindZSet:
		tag = "z"
	case routing.KindSet:
		tag = "s"
	}
	r, err := readMemberShard.run(ctx, f.client, []string{shard}, tag).Slice()
	if err != nil {
		return nil, 0, err
	}
	if len(r) != 2 {
		return nil, 0, fmt.Errorf("unexpected reply of %d elements", len(r))
	}
	at, _ := r[1].(int64)
	flat, _ := r[0].([]any)
	var out []memberVal
	if kind == routing.KindSet {
		for _, m := range flat {
			s, _ := m.(string)
			out = append(out, memberVal{name: s})
		}
		return out, at, nil
	}
	for i := 0; i+1 < len(flat); i += 2 {
		name, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		if kind == routing.KindZSet {
			score, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, 0, errors.New("fold: a member shard's score does not parse")
			}
			v = strconv.FormatFloat(score, 'g', 17, 64)
		} else if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return nil, 0, errors.New("fold: a member shard's field does not hold an integer")
		}
		out = append(out, memberVal{name, v})
	}
	return out, at, nil
}

// deletions reads how many times key was deleted (routing.LedgerDeleted,
// which the engine bumps with K's deletion), "0" for never.
func (f *Folder) deletions(ctx context.Context, ledger string) (string, error) {
	d, err := f.client.HGet(ctx, ledger, routing.LedgerDeleted).Result()
	if errors.Is(err, redis.Nil) {
		return "0", nil
	}
	return d, err
}

// memberShard folds one member shard of kind; zero reports that it held
// no member with nothing pending.
func (f *Folder) memberShard(ctx context.Context, key, shard string, kind routing.MemberKind, res *Result) (bool, error) {
	ledger := routing.FoldLedgerKey(key)
	tag := "h"
	if kind == routing.KindZSet {
		tag = "z"
	}
	for range f.opts.Rounds {
		if err := f.fault(StepRead); err != nil {
			return false, err
		}
		// The deletion count is read before the shard: a credit after a
		// DEL that followed this read finds it moved and moves nothing.
		deleted, err := f.deletions(ctx, ledger)
		if err != nil {
			return false, fmt.Errorf("fold: read ledger: %w", err)
		}
		members, at, err := f.readMembers(ctx, shard, kind)
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
				if err := f.moveSetMember(ctx, key, shard, m.name, at, deleted, res); err != nil {
					return false, err
				}
				continue
			}
			rec, err := creditMember.run(ctx, f.client, []string{key, ledger, seqKey(key, shard)}, shard, m.v, m.name, tag, at, deleted, routing.LedgerDeleted).Text()
			if err != nil {
				return false, fmt.Errorf("fold: credit base key: %w", err)
			}
			if rec == "" {
				// K was deleted since the read: read again.
				break
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

// moveSetMember adds m to the base key (creditSetMember: not after a
// deletion since the read, with the shard's expiry at when the base key
// is gone), then removes it from the shard (each idempotent: a replay
// changes nothing).
func (f *Folder) moveSetMember(ctx context.Context, key, shard, m string, at int64, deleted string, res *Result) error {
	ledger := routing.FoldLedgerKey(key)
	rec, err := creditSetMember.run(ctx, f.client, []string{key, ledger, seqKey(key, shard)}, m, at, deleted, routing.LedgerDeleted, shard).Text()
	if err != nil {
		return fmt.Errorf("fold: credit base key: %w", err)
	}
	if rec == "" {
		// Deleted since the read: m went with the shard, and an m in the
		// shard now was added after the deletion: it stays.
		return nil
	}
	mv, err := routing.ParseFoldRecord(rec)
	if err != nil {
		return fmt.Errorf("fold: malformed set record of %d bytes", len(rec))
	}
	if err := f.fault(StepDebit); err != nil {
		return err
	}
	keys := []string{shard, routing.FoldAckKey(shard), routing.FoldDebitKey(shard)}
	if err := debitSetMember.run(ctx, f.client, keys, m, mv.N, rec).Err(); err != nil {
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
	keys := []string{shard, routing.FoldAckKey(shard), routing.FoldDebitKey(shard)}
	if err := debitMember.run(ctx, f.client, keys, r.neg, r.n, r.field, r.kind, rec).Err(); err != nil {
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
