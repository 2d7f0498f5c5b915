// Package redishook applies a heatsink routing table inside a Go process:
// a go-redis v9 hook that sends GET, SET, INCR/DECR/INCRBY/DECRBY and DEL
// on mitigated keys through an engine.Engine, the same engine the sidecar
// proxy uses, and lets every other command through untouched.
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

	"github.com/heatsink-dev/heatsink/engine"
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
		if bypassed(ctx) {
			return next(ctx, cmd)
		}
		switch key, r := h.route(cmd); r {
		case viaEngine:
			return h.apply(bypass(ctx), cmd, key, func(ctx context.Context, c redis.Cmder) error { return next(ctx, c) })
		case rawInvalidate:
			// Another command on a mitigated key goes to Redis as is; if
			// it wrote, the local cache must forget the key.
			err := next(ctx, cmd)
			h.e.Invalidate(key)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook routes a pipeline. Commands on mitigated keys are
// applied one by one through the engine, in order, after the others have
// been sent as one pipeline; MULTI/EXEC transactions pass through untouched
// (a transaction cannot span the physical keys of other slots), and the
// mitigated keys they name are invalidated in the local cache.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if bypassed(ctx) || !h.anyMitigated(cmds) {
			return next(ctx, cmds)
		}
		tx := cmds[0].Name() == "multi"
		var mine, rest []redis.Cmder
		var touched []string
		for _, c := range cmds {
			key, r := h.route(c)
			switch {
			case r == viaEngine && !tx:
				mine = append(mine, c)
			case r != notMitigated:
				touched = append(touched, key)
				rest = append(rest, c)
			default:
				rest = append(rest, c)
			}
		}
		var first error
		if len(rest) > 0 {
			first = next(ctx, rest)
		}
		for _, k := range touched {
			h.e.Invalidate(k)
		}
		raw := func(ctx context.Context, c redis.Cmder) error { return next(ctx, []redis.Cmder{c}) }
		for _, c := range mine {
			key, _ := h.route(c)
			if err := h.apply(bypass(ctx), c, key, raw); err != nil && first == nil && !errors.Is(err, redis.Nil) {
				first = err
			}
		}
		return first
	}
}

func (h *Hook) anyMitigated(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if _, r := h.route(c); r != notMitigated {
			return true
		}
	}
	return false
}

type routeKind int

const (
	notMitigated  routeKind = iota
	viaEngine               // the engine implements the command
	rawInvalidate           // sent as is, then the key is invalidated
)

// handles is engine.Handles plus the SET variants go-redis sends as their
// own commands (SetNX without expiry, SetEx), which the hook rewrites to
// SET with options.
func handles(name string) bool {
	switch name {
	case "setnx", "setex", "psetex":
		return true
	}
	return engine.Handles(name)
}

// route decides how cmd is sent: through the engine when its key is in the
// table and the engine implements it, otherwise as is.
func (h *Hook) route(cmd redis.Cmder) (string, routeKind) {
	args := cmd.Args()
	if len(args) < 2 {
		return "", notMitigated
	}
	if cmd.Name() == "del" {
		for _, a := range args[1:] {
			if k, ok := a.(string); ok && h.e.Lookup(k) {
				return k, viaEngine
			}
		}
		return "", notMitigated
	}
	key, ok := args[1].(string)
	if !ok || !h.e.Lookup(key) {
		return "", notMitigated
	}
	if handles(cmd.Name()) {
		return key, viaEngine
	}
	return key, rawInvalidate
}

// apply runs cmd through the engine and stores the reply in cmd.
// raw sends a command to Redis without the hook, for the unmitigated keys
// of a multi-key DEL.
func (h *Hook) apply(ctx context.Context, cmd redis.Cmder, key string, raw func(context.Context, redis.Cmder) error) error {
	args := cmd.Args()
	switch name := cmd.Name(); name {
	case "get":
		if len(args) != 2 {
			break
		}
		v, found, err := h.e.Get(ctx, key)
		if err == nil && !found {
			err = redis.Nil
		}
		return setString(cmd, string(v), err)
	case "set", "setnx", "setex", "psetex":
		// The SET abbreviations become SET with options (engine.SetForm),
		// so replicas and split counters are written as by SET.
		valArg, opts, ok := engine.SetForm(name, args[2:])
		if !ok {
			break
		}
		val, err := bytesOf(valArg)
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		ok, err = h.e.Set(ctx, key, val, opts...)
		return setSet(cmd, ok, err)
	case "incr", "decr", "incrby", "decrby":
		n := int64(1)
		if name == "incrby" || name == "decrby" {
			if len(args) != 3 {
				break
			}
			v, err := intOf(args[2])
			if err != nil {
				cmd.SetErr(err)
				return err
			}
			n = v
		}
		if strings.HasPrefix(name, "decr") {
			n = -n
		}
		v, err := h.e.IncrBy(ctx, key, n)
		return setInt(cmd, v, err)
	case "del":
		v, err := h.del(ctx, args[1:], raw)
		return setInt(cmd, v, err)
	}
	err := fmt.Errorf("ERR heatsink: unexpected form of %s on a mitigated key", cmd.Name())
	cmd.SetErr(err)
	return err
}

// del deletes mitigated keys through the engine and the others with one
// raw DEL, and returns how many were removed.
func (h *Hook) del(ctx context.Context, args []any, raw func(context.Context, redis.Cmder) error) (int64, error) {
	var total int64
	plain := []any{"del"}
	for _, a := range args {
		k, ok := a.(string)
		if !ok || !h.e.Lookup(k) {
			plain = append(plain, a)
			continue
		}
		n, err := h.e.Del(ctx, k)
		if err != nil {
			return total, err
		}
		total += n
	}
	if len(plain) > 1 {
		c := redis.NewIntCmd(ctx, plain...)
		if err := raw(ctx, c); err != nil {
			return total, err
		}
		total += c.Val()
	}
	return total, nil
}

func setString(cmd redis.Cmder, v string, err error) error {
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	switch c := cmd.(type) {
	case *redis.StringCmd:
		c.SetVal(v)
	case *redis.Cmd:
		c.SetVal(v)
	default:
		return unexpected(cmd)
	}
	return nil
}

func setInt(cmd redis.Cmder, v int64, err error) error {
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	switch c := cmd.(type) {
	case *redis.IntCmd:
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

func intOf(v any) (int64, error) {
	b, err := bytesOf(v)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, errors.New("ERR value is not an integer or out of range")
	}
	return n, nil
}
