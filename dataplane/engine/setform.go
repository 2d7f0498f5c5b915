package engine

import "strings"

// SetForm maps a command of the SET family to the value and SET options
// that Engine.Set takes, so that the proxy and the go-redis hook route
// SETNX, SETEX and PSETEX on a mitigated key exactly like the SET they
// abbreviate (replicas and split counters included) instead of writing the
// base key alone. name is the command (any case) and args its arguments
// after the key. ok is false for another command or a malformed form (wrong
// number of arguments), which the caller answers as Redis would.
//
//	SET k v [opts...]  -> v, opts
//	SETNX k v          -> v, [NX]
//	SETEX k s v        -> v, [EX s]
//	PSETEX k ms v      -> v, [PX ms]
//
// SET's reply is kept by the caller: SETNX answers 1/0 where SET NX answers
// OK/nil.
func SetForm(name string, args []any) (val any, opts []any, ok bool) {
	switch strings.ToUpper(name) {
	case "SET":
		if len(args) < 1 {
			return nil, nil, false
		}
		return args[0], args[1:], true
	case "SETNX":
		if len(args) != 1 {
			return nil, nil, false
		}
		return args[0], []any{"NX"}, true
	case "SETEX":
		if len(args) != 2 {
			return nil, nil, false
		}
		return args[1], []any{"EX", args[0]}, true
	case "PSETEX":
		if len(args) != 2 {
			return nil, nil, false
		}
		return args[1], []any{"PX", args[0]}, true
	}
	return nil, nil, false
}
