// Package redishook applies a heatsink routing table inside a Go process:
// a go-redis v9 hook that decides for every command naming a mitigated key
// exactly as the sidecar proxy does (engine.Classify): served through an
// engine.Engine (GET, SET and its abbreviations, INCR/DECR/INCRBY/DECRBY,
// MGET, and on split counters or replicated keys DEL, UNLINK, EXISTS, MSET),
// sent raw where the base key alone is the truth, or refused with an error
// where neither would be exact (APPEND on a split counter, say). Commands
// on other keys go through untouched.
//
//	rdb := redis.NewClient(opts)          // or redis.NewClusterClient
//	eng := engine.New(rdb, engine.Options{})
//	rdb.AddHook(redishook.New(eng))
//	// follow the table: watch.New(watch.Options{..., OnTable: eng.SetTable})
//
// The engine issues its own commands through the same client; the hook
// marks their context so it does not intercept them again.
//
// The table governs one database (routing.Table.Database): a client of
// another database (redis.Options.DB) goes through untouched, unreported.
package redishook

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Hook is a redis.Hook applying an engine's routing table.
type Hook struct {
	e      *engine.Engine
	obs    Observer
	policy string
}

var _ redis.Hook = (*Hook)(nil)

// Observer receives key accesses: the node's agent client
// (node agent/counts.Client, the one the sidecar uses). Observe must not
// block.
type Observer interface {
	Observe(policy, key string, reads, writes, bytes uint32)
}

// Option configures a Hook.
type Option func(*Hook)

// WithObserver reports every keyed command's access to o, for policy
// ("<namespace>/<name>"), exactly as the sidecar does: the first key of
// every command, a write when the command may write (with its request's
// size), a read otherwise (with its reply's size, once it came); for
// commands the engine serves, every key it touched. Without it an
// application that only uses the hook sends the node agent nothing, and its
// hot keys are never detected.
func WithObserver(o Observer, policy string) Option {
	return func(h *Hook) { h.obs, h.policy = o, policy }
}

// New returns a hook for e; add it with client.AddHook.
func New(e *engine.Engine, opts ...Option) *Hook {
	h := &Hook{e: e}
	for _, o := range opts {
		o(h)
	}
	return h
}

type bypassKey struct{}

// bypass marks ctx as the engine's own: the hook passes its commands on.
func bypass(ctx context.Context) context.Context {
	return context.WithValue(ctx, bypassKey{}, true)
}

func bypassed(ctx context.Context) bool { return ctx.Value(bypassKey{}) != nil }

// DialHook is a no-op.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook routes one command.
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if bypassed(ctx) || h.otherDB() {
			return next(ctx, cmd)
		}
		if h.idle() {
			err := next(ctx, cmd)
			h.report(cmd)
			return err
		}
		args := wireArgs(cmd)
		d := h.classify(args, false)
		switch {
		case d.Class == engine.ClassNone:
			err := next(ctx, cmd)
			h.report(cmd)
			return err
		case d.Op == engine.OpRaw:
			// The base key alone is the truth: Redis answers; if the
			// command wrote, the local cache must forget the keys.
			shed, sent := engine.ShedTimed(d), time.Time{}
			if shed != "" {
				sent = time.Now()
			}
			err := next(ctx, cmd)
			if shed != "" {
				// The shed key's limiter follows how long its shard takes.
				h.e.ShedLatency(shed, d.Write, time.Since(sent))
			}
			h.invalidate(args, d)
			h.report(cmd)
			return err
		}
		raw := func(ctx context.Context, cmds []redis.Cmder) error {
			var first error
			for _, c := range cmds {
				// go-redis stores a command's error only once the whole
				// hook chain returns: store it here, it is read below.
				if err := next(ctx, c); err != nil {
					c.SetErr(err)
					if first == nil {
						first = err
					}
				}
			}
			return first
		}
		return h.apply(ctx, cmd, args, d, raw)
	}
}

// ProcessPipelineHook routes a pipeline in the caller's order: each run of
// commands Redis answers alone goes as one pipeline, and a command served
// by the engine runs after the run before it and before the commands after
// it, so every command sees the effects of those queued before it.
//
// A MULTI/EXEC transaction cannot include the engine's own commands (they
// span other slots): it goes as is when every command in it may go raw (the
// mitigated keys it writes are then invalidated), and is refused whole,
// without sending anything, otherwise.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if bypassed(ctx) || len(cmds) == 0 || h.otherDB() {
			return next(ctx, cmds)
		}
		if h.idle() {
			err := next(ctx, cmds)
			h.reportAll(cmds)
			return err
		}
		tx := cmds[0].Name() == "multi"
		args := make([][][]byte, len(cmds))
		ds := make([]engine.Decision, len(cmds))
		mitigated := false
		for i, c := range cmds {
			args[i] = wireArgs(c)
			ds[i] = h.classify(args[i], tx)
			if ds[i].Class != engine.ClassNone {
				mitigated = true
			}
		}
		if !mitigated {
			err := next(ctx, cmds)
			h.reportAll(cmds)
			return err
		}
		if tx {
			for _, d := range ds {
				if d.Op == engine.OpRefuse {
					err := errors.New(d.Err)
					for _, c := range cmds {
						c.SetErr(err)
					}
					return err
				}
			}
			err := next(ctx, cmds)
			for i := range cmds {
				h.invalidate(args[i], ds[i])
			}
			h.reportAll(cmds)
			return err
		}
		var first error
		note := func(err error) {
			if err != nil && first == nil && !errors.Is(err, redis.Nil) {
				first = err
			}
		}
		var run []redis.Cmder
		var runIdx []int
		flush := func() {
			if len(run) == 0 {
				return
			}
			note(next(ctx, run))
			for _, i := range runIdx {
				h.invalidate(args[i], ds[i])
			}
			h.reportAll(run)
			run, runIdx = run[:0], runIdx[:0]
		}
		raw := func(ctx context.Context, cs []redis.Cmder) error { return next(ctx, cs) }
		for i, c := range cmds {
			if ds[i].Class == engine.ClassNone || ds[i].Op == engine.OpRaw {
				run = append(run, c)
				runIdx = append(runIdx, i)
				continue
			}
			flush()
			note(h.apply(ctx, c, args[i], ds[i], raw))
		}
		flush()
		return first
	}
}

// otherDB reports that the client's database (its Options().DB, which
// the engine was given) is not the one the table governs: its commands
// then pass through untouched and are not reported for the policy, as the
// sidecar does for a connection that selected another database. A SELECT
// sent by hand on a redis.Conn is not seen (see docs/engine.md).
func (h *Hook) otherDB() bool { return h.e.ClientDB() != h.e.Database() }

// idle reports an empty table: then the hook does nothing, for one atomic
// load.
func (h *Hook) idle() bool { return len(h.e.Table().Entries) == 0 }

// classify is the engine's decision for the command, the one the sidecar
// proxy takes for the same command.
//
// It first reports the command's family for each key it names to the
// observer, if it takes families, as the proxy does
// (command.Info.KeyFamilies), and then a refusal because of the key's
// move (not a shed), if it takes refusals, as the proxy does too.
func (h *Hook) classify(args [][]byte, inTx bool) engine.Decision {
	if fo, ok := h.obs.(interface {
		ObserveFamilies(policy, key string, f routing.Families)
	}); ok && len(args) > 0 {
		if c, known := command.Lookup(args[0]); known {
			c.KeyFamilies(args, inTx, func(key []byte, f routing.Families) {
				fo.ObserveFamilies(h.policy, string(key), f)
			})
		}
	}
	d := h.e.Decide(args, inTx)
	if ro, ok := h.obs.(interface{ ObserveRefused(policy, key string) }); ok && d.Op == engine.OpRefuse && d.Shed == "" && d.Entry != nil {
		ro.ObserveRefused(h.policy, d.Entry.Key)
	}
	if d.Op == engine.OpRead {
		// A cacheable read of another type than strings is answered
		// with Redis' reply bytes (engine.Read), which go-redis' typed
		// commands (HGetAll's map, ZRangeWithScores' pairs) cannot be
		// filled from: the hook sends it to Redis (docs/engine.md).
		d.Op = engine.OpRaw
	}
	return d
}

// invalidate drops the cached copies of the mitigated keys of a command
// sent raw, if it may have written.
func (h *Hook) invalidate(args [][]byte, d engine.Decision) {
	h.e.Invalidates(args, d, h.e.Invalidate)
}

// wireArgs is a command's arguments as go-redis writes them; one that
// cannot be encoded is left nil (sending the command fails anyway).
func wireArgs(cmd redis.Cmder) [][]byte {
	in := cmd.Args()
	out := make([][]byte, len(in))
	for i, a := range in {
		out[i], _ = bytesOf(a)
	}
	return out
}

// apply serves cmd as d says with engine.Serve, the implementation the
// sidecar proxy uses too (its context marked so the hook lets the engine's
// own commands through); the plain keys of a multi-key command go raw, one
// command per key, through send. The reply is stored in cmd.
func (h *Hook) apply(ctx context.Context, cmd redis.Cmder, args [][]byte, d engine.Decision, send func(context.Context, []redis.Cmder) error) error {
	raw := func(ctx context.Context, cmds [][][]byte) []engine.Reply {
		batch := make([]redis.Cmder, len(cmds))
		for i, c := range cmds {
			a := make([]any, len(c))
			for j, b := range c {
				a[j] = string(b)
			}
			batch[i] = redis.NewCmd(ctx, a...)
		}
		_ = send(ctx, batch) // errors are read per command below
		out := make([]engine.Reply, len(batch))
		for i, c := range batch {
			out[i] = replyOf(c.(*redis.Cmd))
		}
		return out
	}
	var obs engine.Observe
	if h.obs != nil {
		obs = func(key string, reads, writes uint32, n int) { h.obs.Observe(h.policy, key, reads, writes, uint32(n)) }
	}
	r, ok := h.e.Serve(bypass(ctx), d, args, raw, obs)
	if !ok {
		// Malformed: Redis rejects it and writes nothing.
		err := send(ctx, []redis.Cmder{cmd})
		h.invalidate(args, d)
		h.report(cmd)
		return err
	}
	if d.Op != engine.OpRefuse && d.Entry != nil {
		h.observeMoved(d.Entry.Key, args, r)
	}
	return store(cmd, r)
}

// replyOf is a raw command's reply in the engine's terms.
func replyOf(c *redis.Cmd) engine.Reply {
	v, err := c.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return engine.Reply{Kind: engine.ReplyNil}
	case err != nil:
		return engine.Reply{Kind: engine.ReplyError, Err: err}
	}
	switch v := v.(type) {
	case int64:
		return engine.Reply{Kind: engine.ReplyInt, Int: v}
	case string:
		return engine.Reply{Kind: engine.ReplyBulk, Bulk: []byte(v)}
	}
	return engine.Reply{Kind: engine.ReplyError, Err: fmt.Errorf("ERR heatsink: unexpected reply %T", v)}
}

// store puts an engine reply in cmd the way go-redis reports it for that
// command: its typed Cmd (StringCmd, IntCmd, StatusCmd, BoolCmd for
// SetNX/SetXX, SliceCmd for MGet) or a generic *redis.Cmd (Do). A nil
// reply is redis.Nil, except for a BoolCmd, where it is false.
func store(cmd redis.Cmder, r engine.Reply) error {
	switch r.Kind {
	case engine.ReplyError:
		cmd.SetErr(r.Err)
		return r.Err
	case engine.ReplyNil:
		if c, ok := cmd.(*redis.BoolCmd); ok {
			c.SetVal(false)
			return nil
		}
		cmd.SetErr(redis.Nil)
		return redis.Nil
	case engine.ReplyInt:
		switch c := cmd.(type) {
		case *redis.BoolCmd: // SETNX through SetNX, EXPIRE, PERSIST
			c.SetVal(r.Int != 0)
			return nil
		case *redis.DurationCmd: // TTL, PTTL, EXPIRETIME, PEXPIRETIME
			c.SetVal(durationOf(c.Name(), r.Int))
			return nil
		}
		return setVal(cmd, r.Int)
	case engine.ReplyStatus:
		if c, ok := cmd.(*redis.BoolCmd); ok { // SET ... NX through SetNX
			c.SetVal(true)
			return nil
		}
		return setVal(cmd, r.Str)
	case engine.ReplyBulk:
		return setVal(cmd, string(r.Bulk))
	}
	return storeCollection(cmd, r)
}

// storeCollection sets cmd's value from the replies of a collection split
// by member (a map, a score, scored pairs, an array or a set).
func storeCollection(cmd redis.Cmder, r engine.Reply) error {
	switch r.Kind {
	case engine.ReplyMap: // HGETALL of a hash split by field
		switch c := cmd.(type) {
		case *redis.MapStringStringCmd:
			m := make(map[string]string, len(r.Elems)/2)
			for i := 0; i+1 < len(r.Elems); i += 2 {
				m[string(r.Elems[i].Bulk)] = string(r.Elems[i+1].Bulk)
			}
			c.SetVal(m)
			return nil
		case *redis.Cmd: // Do: what go-redis gives a RESP3 map
			m := make(map[any]any, len(r.Elems)/2)
			for i := 0; i+1 < len(r.Elems); i += 2 {
				m[string(r.Elems[i].Bulk)] = string(r.Elems[i+1].Bulk)
			}
			c.SetVal(m)
			return nil
		}
		return unexpected(cmd)
	case engine.ReplyDouble: // ZSCORE, ZINCRBY of a sorted set split by member
		f, err := strconv.ParseFloat(string(r.Bulk), 64)
		if err != nil {
			return unexpected(cmd)
		}
		if c, ok := cmd.(*redis.FloatCmd); ok {
			c.SetVal(f)
			return nil
		}
		return setVal(cmd, f)
	case engine.ReplyScored: // ZRANGE ... WITHSCORES
		zs := make([]redis.Z, 0, len(r.Elems)/2)
		for i := 0; i+1 < len(r.Elems); i += 2 {
			f, err := strconv.ParseFloat(string(r.Elems[i+1].Bulk), 64)
			if err != nil {
				return unexpected(cmd)
			}
			zs = append(zs, redis.Z{Member: string(r.Elems[i].Bulk), Score: f})
		}
		if c, ok := cmd.(*redis.ZSliceCmd); ok {
			c.SetVal(zs)
			return nil
		}
		return unexpected(cmd)
	case engine.ReplyArray, engine.ReplySet:
		switch c := cmd.(type) {
		case *redis.FloatSliceCmd: // ZMSCORE
			fs := make([]float64, len(r.Elems))
			for i, el := range r.Elems {
				fs[i], _ = strconv.ParseFloat(string(el.Bulk), 64)
			}
			c.SetVal(fs)
			return nil
		case *redis.BoolSliceCmd: // SMISMEMBER
			bs := make([]bool, len(r.Elems))
			for i, el := range r.Elems {
				bs[i] = el.Int != 0
			}
			c.SetVal(bs)
			return nil
		}
		if c, ok := cmd.(*redis.StringSliceCmd); ok { // HKEYS, HVALS, SMEMBERS, ZRANGE
			ss := make([]string, len(r.Elems))
			for i, el := range r.Elems {
				ss[i] = string(el.Bulk)
			}
			c.SetVal(ss)
			return nil
		}
		vals := make([]any, len(r.Elems))
		for i, el := range r.Elems {
			if el.Kind == engine.ReplyBulk {
				vals[i] = string(el.Bulk)
			}
		}
		return setVal(cmd, vals)
	}
	return unexpected(cmd)
}

// durationOf is the value go-redis's DurationCmd gives the integer reply n
// of the command name: -1 and -2 as they are, anything else in seconds
// (TTL, EXPIRETIME) or milliseconds (PTTL, PEXPIRETIME).
func durationOf(name string, n int64) time.Duration {
	switch {
	case n == -1 || n == -2:
		return time.Duration(n)
	case name == "ttl" || name == "expiretime":
		return time.Duration(n) * time.Second
	}
	return time.Duration(n) * time.Millisecond
}

// setVal stores a reply of type T in cmd: its typed Cmd (StringCmd,
// IntCmd, ...) or a generic *redis.Cmd (Do).
func setVal[T any](cmd redis.Cmder, v T) error {
	switch c := cmd.(type) {
	case interface{ SetVal(T) }:
		c.SetVal(v)
	case *redis.Cmd:
		c.SetVal(v)
	default:
		return unexpected(cmd)
	}
	return nil
}

func unexpected(cmd redis.Cmder) error {
	err := fmt.Errorf("ERR heatsink: cannot store the reply of %s in a %T", cmd.Name(), cmd)
	cmd.SetErr(err)
	return err
}

// bytesOf encodes a command argument as go-redis writes it on the wire.
func bytesOf(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return []byte{}, nil
	case string:
		return []byte(v), nil
	case []byte:
		return v, nil
	case int:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int8:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int16:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(nil, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(nil, v, 10), nil
	case uint:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint8:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint16:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint32:
		return strconv.AppendUint(nil, uint64(v), 10), nil
	case uint64:
		return strconv.AppendUint(nil, v, 10), nil
	case float32:
		return strconv.AppendFloat(nil, float64(v), 'f', -1, 32), nil
	case float64:
		return strconv.AppendFloat(nil, v, 'f', -1, 64), nil
	case bool:
		if v {
			return []byte("1"), nil
		}
		return []byte("0"), nil
	case encoding.BinaryMarshaler:
		return v.MarshalBinary()
	}
	return nil, fmt.Errorf("redis: can't marshal %T (implement encoding.BinaryMarshaler)", v)
}
