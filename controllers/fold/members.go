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
// Folder.Split folds a generation as the table's split says; a pending
// record says which kind of move it is by its "h" prefix, so a folder
// resumes either.

// creditMember is step 2 for one field. KEYS: K, ledger, seq key of S.
// ARGV: S, v, field.
var creditMember = newScript(`
local p = redis.call('HGET', KEYS[2], ARGV[1])
if p then return p end
redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[2])
local f = 'seq:' .. ARGV[1]
local n = redis.call('HINCRBY', KEYS[2], f, 1)
if n == 1 then
  local retired = tonumber(redis.call('GET', KEYS[3]) or '0')
  if retired > 0 then
    n = retired + 1
    redis.call('HSET', KEYS[2], f, n)
  end
end
local rec = 'h ' .. ARGV[2] .. ' ' .. n .. ' ' .. ARGV[3]
redis.call('HSET', KEYS[2], ARGV[1], rec)
return rec
`)

// debitMember is step 3 for one field. KEYS: S, its ack key. ARGV: −v
// (negated in Go: Lua would print −0 as "-0", which Redis refuses), n,
// field.
var debitMember = newScript(`
local a = tonumber(redis.call('GET', KEYS[2]) or '0')
if a >= tonumber(ARGV[2]) then return 0 end
local left = redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[1])
if left == 0 then redis.call('HDEL', KEYS[1], ARGV[3]) end
redis.call('SET', KEYS[2], ARGV[2])
return 1
`)

// memberRecord is a pending member move: "h v n field".
type memberRecord struct {
	v, n  int64
	field string
}

func isMemberRecord(rec string) bool { return strings.HasPrefix(rec, "h ") }

func parseMemberRecord(rec string) (memberRecord, error) {
	parts := strings.SplitN(rec, " ", 4)
	var r memberRecord
	if len(parts) != 4 || parts[0] != "h" {
		return r, fmt.Errorf("fold: malformed member ledger record of %d bytes", len(rec))
	}
	var err, err2 error
	r.v, err = strconv.ParseInt(parts[1], 10, 64)
	r.n, err2 = strconv.ParseInt(parts[2], 10, 64)
	if err != nil || err2 != nil || r.n <= 0 {
		return r, fmt.Errorf("fold: malformed member ledger record of %d bytes", len(rec))
	}
	r.field = parts[3]
	return r, nil
}

// memberShard folds one member shard (a hash); zero reports that it held
// no field with nothing pending.
func (f *Folder) memberShard(ctx context.Context, key, shard string, res *Result) (bool, error) {
	ledger := routing.SameSlotKey(key, "fold")
	for range f.opts.Rounds {
		if err := f.fault(StepRead); err != nil {
			return false, err
		}
		fields, err := f.client.HGetAll(ctx, shard).Result()
		if err != nil {
			return false, fmt.Errorf("fold: read member shard: %w", err)
		}
		if len(fields) == 0 {
			return true, nil
		}
		for field, s := range fields {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return false, errors.New("fold: a member shard's field does not hold an integer")
			}
			if err := f.fault(StepCredit); err != nil {
				return false, err
			}
			rec, err := creditMember.run(ctx, f.client, []string{key, ledger, seqKey(key, shard)}, shard, v, field).Text()
			if err != nil {
				return false, fmt.Errorf("fold: credit base key: %w", err)
			}
			// rec is ours, or a move another folder left pending: finish
			// it either way; the field is read again next round.
			if err := f.finishAny(ctx, ledger, shard, rec, res); err != nil {
				return false, err
			}
		}
	}
	return false, nil
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
	if err := debitMember.run(ctx, f.client, []string{shard, ack}, -r.v, r.n, r.field).Err(); err != nil {
		return fmt.Errorf("fold: debit member shard: %w", err)
	}
	if err := f.fault(StepClear); err != nil {
		return err
	}
	if err := clearRecord.run(ctx, f.client, []string{ledger}, shard, rec).Err(); err != nil {
		return fmt.Errorf("fold: clear ledger: %w", err)
	}
	res.Moves++
	res.Moved += r.v
	return nil
}

// finishAny finishes a pending record of either kind.
func (f *Folder) finishAny(ctx context.Context, ledger, shard, rec string, res *Result) error {
	if isMemberRecord(rec) {
		return f.finishMember(ctx, ledger, shard, rec, res)
	}
	return f.finish(ctx, ledger, shard, rec, res)
}
