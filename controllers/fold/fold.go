// Package fold moves the increments held by the shards of a retired split
// generation back into the base key, exactly once, however often the folding
// process dies and restarts.
//
// The protocol, per shard S of logical key K:
//
//  1. v := GET S. If v is 0, the shard is folded.
//  2. On K's node (one Lua script, atomic): unless the ledger hash
//     L = routing.SameSlotKey(K, "fold") already holds a pending record for
//     S, INCRBY K v, take the next sequence number n of S from L and record
//     (v, n) for S in L.
//  3. On S's node (one Lua script): unless the ack key
//     A = routing.FoldAckKey(S) already holds n or more,
//     DECRBY S v and SET A n (and the move's record in
//     routing.FoldDebitKey(S)).
//  4. Remove S's record from L if it still holds (v, n).
//
// Every move is a pair (+v on K, −v on S) tied to one sequence number: step
// 2 applies +v at most once because a second record for S cannot be created
// while one is pending; step 3 applies −v at most once because A keeps the
// highest number applied, and numbers are applied in order (move n+1 is
// credited only after move n was cleared, which is after its debit). A folder
// killed anywhere resumes by finishing the pending record (steps 3 and 4)
// before it reads the shard again; a slow concurrent folder replaying an old
// record finds A ahead of it and does nothing. Shards are never deleted:
// DECRBY keeps increments that arrived after step 1 (late writers), and they
// are folded in a later round. So K plus all shards is conserved at every
// step boundary, and once traffic stops and folds complete, K alone holds
// exactly the acknowledged increments.
//
// Both sides record the move in their own slot with the change (the
// ledger's seq:S and last:S on K's side, A and the debit record on S's):
// a reader that reads each place with its records, atomically, knows
// which moves each place's value includes, and counts a move seen on one
// side only once (routing.ReconcileFold, dataplane/engine foldread.go).
//
// Expiry. A split counter with an expiry carries it on K and on every shard
// (the engine gives each shard K's), so when it passes the whole counter is
// gone. A fold must not bring back what expired: step 1 reads the shard's
// expiry X with v (PEXPIRETIME, one script), and the move carries X. Step 2
// adds v to K as it is (keeping K's expiry) when K exists or the shard had
// no expiry; when K is gone and the shard had one, K is created with v and
// expiry X, which Redis deletes at once if X has passed: v expired with the
// counter, and no key is left without an expiry. Step 3 debits a shard that
// is gone (it expired since step 1) only if it had no expiry, so an expired
// shard is not re-created at −v. Either way K plus the shards is conserved
// for every value that has not expired.
package fold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Step names a point of the protocol, for fault injection.
type Step int

// The steps, in order.
const (
	StepRead Step = iota + 1
	StepCredit
	StepDebit
	StepClear
)

// Options tune a Folder.
type Options struct {
	// Rounds bounds how many times one shard is re-read after a fold in one
	// call, to catch late increments (default 3).
	Rounds int
	// Fault, if set, is called before each step; a non-nil error aborts the
	// fold right there, as if the process died. For tests.
	Fault func(Step) error
}

// Folder folds retired shards through one Redis client (standalone or
// cluster). It is safe for concurrent use on different keys; concurrent use
// on the same key is safe too (the ledger serialises it), just wasteful.
type Folder struct {
	client redis.UniversalClient
	opts   Options
}

// New returns a Folder.
func New(client redis.UniversalClient, opts Options) *Folder {
	if opts.Rounds <= 0 {
		opts.Rounds = 3
	}
	return &Folder{client: client, opts: opts}
}

// Result of folding one generation.
type Result struct {
	// Done is true when every shard read 0 with nothing pending: the
	// generation may leave the routing table.
	Done bool
	// Moves counts completed moves (+v/−v pairs), Moved their sum.
	Moves int
	Moved int64
}

// credit is step 2. The sequence number of a shard lives in the ledger
// (field seq:S) while its generation is folded; Retire moves it out to a
// key of its own that expires after the ack key (KEYS[3]), and a credit
// after that (a stale folder, a late writer's increments) goes on from it,
// so a number is never reused while an ack key could hold it.
//
// ARGV[3] is the shard's PEXPIRETIME at step 1 (-1: none): when the base
// key is gone, the value keeps that expiry (see the package doc).
var credit = newScript(`
local p = redis.call('HGET', KEYS[2], ARGV[1])
if p then return p end
local at = tonumber(ARGV[3])
local gone = at > 0 and not redis.call('GET', KEYS[1])
redis.call('INCRBY', KEYS[1], ARGV[2])
if gone then redis.call('PEXPIREAT', KEYS[1], at) end
` + nextMoveLua("ARGV[1]") + `
local rec = ARGV[2] .. ' ' .. n .. ' ' .. ARGV[3]
redis.call('HSET', KEYS[2], ARGV[1], rec, 'last:' .. ARGV[1], rec)
return rec
`)

// retireSeq moves a folded shard's sequence number out of the ledger into
// its own key, which expires after ARGV[2] ms, and drops its last record:
// the ledger does not grow with every generation ever folded. A pending
// record keeps them in place.
var retireSeq = newScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
local f = 'seq:' .. ARGV[1]
local n = redis.call('HGET', KEYS[1], f)
if not n then return 0 end
local kept = tonumber(redis.call('GET', KEYS[2]) or '0')
if kept < tonumber(n) then kept = tonumber(n) end
redis.call('SET', KEYS[2], kept, 'PX', ARGV[2])
redis.call('HDEL', KEYS[1], f, 'last:' .. ARGV[1])
return 1
`)

// nextMoveLua is the Lua that numbers a shard's next move, n, in a credit
// script whose KEYS[2] is the ledger and KEYS[3] the shard's retired
// sequence key (seqKey), shard naming the shard's ARGV: its ledger count
// goes on from a retired generation's number, so a reader comparing move
// numbers (routing.ReconcileFold) never sees one go back. credit's,
// creditMember's and creditSetMember's one numbering.
func nextMoveLua(shard string) string {
	return `local f = 'seq:' .. ` + shard + `
local n = redis.call('HINCRBY', KEYS[2], f, 1)
if n == 1 then
  local retired = tonumber(redis.call('GET', KEYS[3]) or '0')
  if retired > 0 then
    n = retired + 1
    redis.call('HSET', KEYS[2], f, n)
  end
end`
}

// seqKey is where Retire keeps a shard's sequence number.
func seqKey(key, shard string) string { return routing.FoldSeqKey(key, shard) }

// debit is step 3. ARGV[3] is the shard's expiry when it was read: a shard
// that had one and is gone now expired with its value, and is not
// re-created at −v. KEYS[3] (routing.FoldDebitKey) gets the move's record
// ARGV[4], prefixed by whether the debit changed the shard, for readers
// that reconcile a snapshot of the shard with one of K (routing.ReconcileFold).
var debit = newScript(`
local a = tonumber(redis.call('GET', KEYS[2]) or '0')
if a >= tonumber(ARGV[2]) then return 0 end
local applied = '0'
if not (tonumber(ARGV[3]) > 0 and not redis.call('GET', KEYS[1])) then
  redis.call('DECRBY', KEYS[1], ARGV[1])
  applied = '1'
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], applied .. ' ' .. ARGV[4])
return 1
`)

// readShard is step 1: the shard's value and its PEXPIRETIME, read
// together.
var readShard = newScript(`
local v = redis.call('GET', KEYS[1]) or '0'
return {v, redis.call('PEXPIRETIME', KEYS[1])}
`)

var clearRecord = newScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
`)

// Generation folds every shard of gen of key, a split string counter,
// into key.
func (f *Folder) Generation(ctx context.Context, key string, gen routing.Generation) (Result, error) {
	return f.generation(ctx, key, gen, nil)
}

// Split folds every shard of gen of key into key as the routing table's
// split says: by field or member (members.go) when s.Members, as its
// Kind says, else as a counter.
func (f *Folder) Split(ctx context.Context, key string, s *routing.Split, gen routing.Generation) (Result, error) {
	return f.generation(ctx, key, gen, s)
}

func (f *Folder) generation(ctx context.Context, key string, gen routing.Generation, s *routing.Split) (Result, error) {
	var res Result
	res.Done = true
	for _, shard := range routing.ShardKeys(key, gen) {
		zero, err := f.shard(ctx, key, shard, s, &res)
		if err != nil {
			return res, err
		}
		res.Done = res.Done && zero
	}
	return res, nil
}

// shard folds one shard (of a member split when s.Members); zero reports
// that it read 0 (no member) with nothing pending.
func (f *Folder) shard(ctx context.Context, key, shard string, s *routing.Split, res *Result) (bool, error) {
	ledger := routing.FoldLedgerKey(key)
	// Resume a move a previous folder left pending.
	rec, err := f.client.HGet(ctx, ledger, shard).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return false, fmt.Errorf("fold: read ledger: %w", err)
	default:
		if err := f.finishAny(ctx, ledger, shard, rec, res); err != nil {
			return false, err
		}
	}
	if s != nil && s.Members {
		return f.memberShard(ctx, key, shard, s.Kind, res)
	}
	for range f.opts.Rounds {
		if err := f.fault(StepRead); err != nil {
			return false, err
		}
		v, at, err := f.read(ctx, shard)
		if err != nil {
			return false, fmt.Errorf("fold: read shard: %w", err)
		}
		if v == 0 {
			return true, nil
		}
		if err := f.fault(StepCredit); err != nil {
			return false, err
		}
		rec, err := credit.run(ctx, f.client, []string{key, ledger, seqKey(key, shard)}, shard, v, at).Text()
		if err != nil {
			return false, fmt.Errorf("fold: credit base key: %w", err)
		}
		// rec is ours, or a move another folder left pending: finish it
		// either way, then read the shard again.
		if err := f.finishAny(ctx, ledger, shard, rec, res); err != nil {
			return false, err
		}
	}
	return false, nil
}

// read is step 1: the shard's value (0 if it is missing) and its
// PEXPIRETIME (-1: none).
func (f *Folder) read(ctx context.Context, shard string) (v, at int64, err error) {
	r, err := readShard.run(ctx, f.client, []string{shard}).Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(r) != 2 {
		return 0, 0, fmt.Errorf("unexpected reply of %d elements", len(r))
	}
	s, _ := r[0].(string)
	v, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("shard does not hold an integer")
	}
	at, _ = r[1].(int64)
	return v, at, nil
}

// finish applies steps 3 and 4 of the pending record rec ("v n at"; a
// record written before expiries were carried has no "at": no expiry).
func (f *Folder) finish(ctx context.Context, ledger, shard, rec string, res *Result) error {
	m, err := routing.ParseFoldRecord(rec)
	if err != nil || m.Kind != 'c' {
		return fmt.Errorf("fold: malformed ledger record for a shard of %d bytes", len(rec))
	}
	v, _ := strconv.ParseInt(m.V, 10, 64) // ParseFoldRecord checked it
	n, at := m.N, m.At
	if err := f.fault(StepDebit); err != nil {
		return err
	}
	keys := []string{shard, routing.FoldAckKey(shard), routing.FoldDebitKey(shard)}
	if err := debit.run(ctx, f.client, keys, v, n, at, rec).Err(); err != nil {
		return fmt.Errorf("fold: debit shard: %w", err)
	}
	if err := f.fault(StepClear); err != nil {
		return err
	}
	if err := clearRecord.run(ctx, f.client, []string{ledger}, shard, rec).Err(); err != nil {
		return fmt.Errorf("fold: clear ledger: %w", err)
	}
	res.Moves++
	res.Moved += v
	return nil
}

// RetiredTTL is how long the shards and ack keys of a generation stay in
// Redis once it has been folded and left the routing table. The ack keys are
// what stop a slow folder from replaying an old record, so they must outlive
// every folder that could still hold one (a manager pass is bounded by its
// Redis deadline, seconds) and every sidecar writing through a table older
// than the grace period (the routing ConfigMap propagation, seconds to a
// minute). A day is far beyond both, and bounds the growth of Redis per
// generation. The shards' sequence numbers leave the ledger for keys that
// live twice as long (a hash field TTL would need Redis 7.4): a sequence
// number must outlive the ack key that holds it, or a later move could
// reuse it and skip its debit.
const RetiredTTL = 24 * time.Hour

// Retire sets ttl on every shard of gen of key and on its ack key, and
// moves the shards' sequence numbers out of the ledger into keys that
// expire after 2×ttl. Call it only after the generation was folded
// (Result.Done) and removed from the routing table: after that no reader
// sums the shards, and an increment a very late writer still sends there is
// lost either way (see package doc). A ttl shorter than the bound above
// could let a stale folder debit twice.
func (f *Folder) Retire(ctx context.Context, key string, gen routing.Generation, ttl time.Duration) error {
	_, err := f.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, shard := range routing.ShardKeys(key, gen) {
			p.Expire(ctx, shard, ttl)
			p.Expire(ctx, routing.FoldAckKey(shard), ttl)
			p.Expire(ctx, routing.FoldDebitKey(shard), ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fold: expire retired shards: %w", err)
	}
	ledger := routing.FoldLedgerKey(key)
	for _, shard := range routing.ShardKeys(key, gen) {
		keys := []string{ledger, seqKey(key, shard)}
		if err := retireSeq.run(ctx, f.client, keys, shard, (2 * ttl).Milliseconds()).Err(); err != nil {
			return fmt.Errorf("fold: retire sequence number: %w", err)
		}
	}
	return nil
}

func (f *Folder) fault(s Step) error {
	if f.opts.Fault == nil {
		return nil
	}
	return f.opts.Fault(s)
}
