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
package redishook

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// Hook is a redis.Hook applying an engine's routing table.
type Hook struct {
	e *engine.Engine
}

var _ redis.Hook = (*Hook)(nil)

// New returns a hook for e; add it with client.AddHook.
func New(e *engine.Engine) *Hook { return &Hook{e: e} }

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
		if bypassed(ctx) || h.idle() {
			return next(ctx, cmd)
		}
		args := wireArgs(cmd)
		d := h.classify(args, false)
		switch {
		case d.Class == engine.ClassNone:
			return next(ctx, cmd)
		case d.Op == engine.OpRaw:
			// The base key alone is the truth: Redis answers; if the
			// command wrote, the local cache must forget the keys.
			err := next(ctx, cmd)
			h.invalidate(args, d)
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
		if bypassed(ctx) || h.idle() || len(cmds) == 0 {
			return next(ctx, cmds)
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
			return next(ctx, cmds)
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

// idle reports an empty table: then the hook does nothing, for one atomic
// load.
func (h *Hook) idle() bool { return len(h.e.Table().Entries) == 0 }

// classify is engine.Classify against the engine's table, the decision the
// sidecar proxy takes for the same command.
func (h *Hook) classify(args [][]byte, inTx bool) engine.Decision {
	t := h.e.Table()
	return engine.Classify(args, func(k string) (*routing.Entry, bool) {
		if !h.e.Lookup(k) {
			return nil, false
		}
		return t.Lookup(k), true
	}, inTx)
}

// invalidate drops the cached copies of the mitigated keys of a command
// sent raw, if it may have written.
func (h *Hook) invalidate(args [][]byte, d engine.Decision) {
	if d.Class == engine.ClassNone || !d.Write {
		return
	}
	engine.ForEachKey(args, func(i int) bool {
		if k := string(args[i]); h.e.Lookup(k) {
			h.e.Invalidate(k)
		}
		return true
	})
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

// apply serves cmd as d says, through the engine (its context marked so
// the hook lets the engine's own commands through) and, for the plain keys
// of a multi-key command, with raw commands sent by raw, one per key (they
// may be on different nodes). The reply is stored in cmd.
func (h *Hook) apply(ctx context.Context, cmd redis.Cmder, args [][]byte, d engine.Decision, raw func(context.Context, []redis.Cmder) error) error {
	ectx := bypass(ctx)
	name := strings.ToLower(string(args[0]))
	fail := func(err error) error {
		cmd.SetErr(err)
		return err
	}
	switch d.Op {
	case engine.OpRefuse:
		return fail(errors.New(d.Err))
	case engine.OpGet, engine.OpStrlen, engine.OpType:
		v, found, err := h.e.Get(ectx, string(args[1]))
		if err != nil {
			return fail(err)
		}
		switch {
		case d.Op == engine.OpStrlen:
			return setVal(cmd, int64(len(v)), nil)
		case d.Op == engine.OpType && found:
			return setVal(cmd, "string", nil)
		case d.Op == engine.OpType:
			return setVal(cmd, "none", nil)
		case !found:
			return fail(redis.Nil)
		}
		return setVal(cmd, string(v), nil)
	case engine.OpMGet:
		vals, err := h.mget(ctx, args[1:], raw)
		if err != nil {
			return fail(err)
		}
		return setVal(cmd, vals, nil)
	case engine.OpExists, engine.OpDel:
		n, err := h.perKeyCount(ctx, name, args[1:], d.Op == engine.OpExists, raw)
		return setVal(cmd, n, err)
	case engine.OpMSet:
		if err := h.mset(ctx, args, raw); err != nil {
			return fail(err)
		}
		return setVal(cmd, "OK", nil)
	case engine.OpSet:
		rest := make([]any, len(args)-2)
		for i, a := range args[2:] {
			rest[i] = string(a)
		}
		val, opts, ok := engine.SetForm(name, rest)
		if !ok {
			break // malformed: Redis rejects it and writes nothing
		}
		ok, err := h.e.Set(ectx, string(args[1]), []byte(val.(string)), opts...)
		if name == "setnx" {
			if c, isCmd := cmd.(*redis.Cmd); isCmd {
				var n int64 // SETNX answers 1 or 0
				if ok {
					n = 1
				}
				return setVal(c, n, err)
			}
		}
		return setSet(cmd, ok, err)
	case engine.OpIncr:
		by := name == "incrby" || name == "decrby"
		if by && len(args) != 3 || !by && len(args) != 2 {
			break
		}
		n := int64(1)
		if by {
			v, err := strconv.ParseInt(string(args[2]), 10, 64)
			if err != nil {
				return fail(errors.New("ERR value is not an integer or out of range"))
			}
			n = v
		}
		if strings.HasPrefix(name, "decr") {
			n = -n
		}
		v, err := h.e.IncrBy(ectx, string(args[1]), n)
		return setVal(cmd, v, err)
	}
	err := raw(ctx, []redis.Cmder{cmd})
	h.invalidate(args, d)
	return err
}

// mget reads mitigated keys through the engine and the others with one raw
// GET each; a key holding another type reads as nil, as in MGET.
func (h *Hook) mget(ctx context.Context, keys [][]byte, raw func(context.Context, []redis.Cmder) error) ([]any, error) {
	vals := make([]any, len(keys))
	var rawCmds []*redis.StringCmd
	var rawIdx []int
	var batch []redis.Cmder
	for i, k := range keys {
		if !h.e.Lookup(string(k)) {
			c := redis.NewStringCmd(ctx, "get", string(k))
			rawCmds, rawIdx, batch = append(rawCmds, c), append(rawIdx, i), append(batch, c)
		}
	}
	if len(batch) > 0 {
		_ = raw(ctx, batch) // errors are read per command below
	}
	for j, c := range rawCmds {
		v, err := c.Result()
		switch {
		case err == nil:
			vals[rawIdx[j]] = v
		case errors.Is(err, redis.Nil), strings.HasPrefix(err.Error(), "WRONGTYPE"):
		default:
			return nil, err
		}
	}
	for i, k := range keys {
		if !h.e.Lookup(string(k)) {
			continue
		}
		v, found, err := h.e.Get(bypass(ctx), string(k))
		if err != nil {
			return nil, err
		}
		if found {
			vals[i] = string(v)
		}
	}
	return vals, nil
}

// perKeyCount answers DEL/UNLINK (exists false) or EXISTS by adding up one
// command per key: through the engine (Del, or Get for a counter's EXISTS)
// for mitigated keys, raw for the others.
func (h *Hook) perKeyCount(ctx context.Context, name string, keys [][]byte, exists bool, raw func(context.Context, []redis.Cmder) error) (int64, error) {
	t := h.e.Table()
	viaEngine := func(k string) bool {
		if !h.e.Lookup(k) {
			return false
		}
		return !exists || engine.ClassOf(t.Lookup(k)) == engine.ClassCounter
	}
	var total int64
	var rawCmds []*redis.IntCmd
	var batch []redis.Cmder
	for _, kb := range keys {
		k := string(kb)
		if viaEngine(k) {
			continue
		}
		c := redis.NewIntCmd(ctx, name, k)
		rawCmds, batch = append(rawCmds, c), append(batch, c)
	}
	if len(batch) > 0 {
		_ = raw(ctx, batch)
	}
	for _, c := range rawCmds {
		n, err := c.Result()
		if err != nil {
			return 0, err
		}
		total += n
	}
	for _, kb := range keys {
		k := string(kb)
		if !viaEngine(k) {
			continue
		}
		var n int64
		var err error
		if exists {
			var found bool
			if _, found, err = h.e.Get(bypass(ctx), k); found {
				n = 1
			}
		} else {
			n, err = h.e.Del(bypass(ctx), k)
		}
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// mset writes mitigated pairs through Engine.Set and the others with one
// raw SET each. Counter values must be integers; that is checked before
// anything is written. Like the proxy's, it is not atomic across keys.
func (h *Hook) mset(ctx context.Context, args [][]byte, raw func(context.Context, []redis.Cmder) error) error {
	t := h.e.Table()
	var batch []redis.Cmder
	var eng []int
	for i := 1; i+1 < len(args); i += 2 {
		k := string(args[i])
		if !h.e.Lookup(k) {
			batch = append(batch, redis.NewStatusCmd(ctx, "set", k, string(args[i+1])))
			continue
		}
		if en := t.Lookup(k); engine.ClassOf(en) == engine.ClassCounter {
			if _, err := strconv.ParseInt(string(args[i+1]), 10, 64); err != nil {
				return errors.New("ERR heatsink: MSET on a key mitigated by " + engine.MitigationName(en) + " needs an integer value")
			}
		}
		eng = append(eng, i)
	}
	if len(batch) > 0 {
		_ = raw(ctx, batch)
		for _, c := range batch {
			if err := c.Err(); err != nil {
				return err
			}
		}
	}
	for _, i := range eng {
		if _, err := h.e.Set(bypass(ctx), string(args[i]), args[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// setVal stores a reply of type T in cmd: its typed Cmd (StringCmd,
// IntCmd, ...) or a generic *redis.Cmd (Do). A non-nil err is stored
// instead.
func setVal[T any](cmd redis.Cmder, v T, err error) error {
	if err != nil {
		cmd.SetErr(err)
		return err
	}
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

// setSet stores SET's reply the way go-redis reports it: "OK", or redis.Nil
// when NX/XX refused (SetNX/SetXX report a bool instead).
func setSet(cmd redis.Cmder, ok bool, err error) error {
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	switch c := cmd.(type) {
	case *redis.BoolCmd:
		c.SetVal(ok)
		return nil
	case *redis.StatusCmd:
		if !ok {
			c.SetErr(redis.Nil)
			return redis.Nil
		}
		c.SetVal("OK")
	case *redis.Cmd:
		if !ok {
			c.SetErr(redis.Nil)
			return redis.Nil
		}
		c.SetVal("OK")
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
