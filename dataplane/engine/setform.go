package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

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

// setArgs is what the engine needs to know of SET's options.
type setArgs struct {
	conditional bool // NX or XX
	keepTTL     bool
	ex, px      int64
	exat, pxat  int64
}

// ttl is the expiry the options set, relative to now.
func (s setArgs) ttl(now time.Time) (time.Duration, bool) {
	switch {
	case s.ex > 0:
		return time.Duration(s.ex) * time.Second, true
	case s.px > 0:
		return time.Duration(s.px) * time.Millisecond, true
	case s.exat > 0:
		return time.Unix(s.exat, 0).Sub(now), true
	case s.pxat > 0:
		return time.UnixMilli(s.pxat).Sub(now), true
	}
	return 0, false
}

func parseSetArgs(args []any) (setArgs, error) {
	var s setArgs
	str := func(a any) (string, error) {
		switch v := a.(type) {
		case string:
			return v, nil
		case []byte:
			return string(v), nil
		case int:
			return strconv.Itoa(v), nil
		case int64:
			return strconv.FormatInt(v, 10), nil
		}
		return "", fmt.Errorf("ERR heatsink: SET option of type %T", a)
	}
	for i := 0; i < len(args); i++ {
		name, err := str(args[i])
		if err != nil {
			return s, err
		}
		switch strings.ToUpper(name) {
		case "NX", "XX":
			s.conditional = true
		case "KEEPTTL":
			s.keepTTL = true
		case "GET":
			return s, errors.New("ERR heatsink: SET ... GET is not supported on a mitigated key")
		case "EX", "PX", "EXAT", "PXAT":
			if i+1 >= len(args) {
				return s, errors.New("ERR syntax error")
			}
			i++
			v, err := str(args[i])
			if err != nil {
				return s, err
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return s, errors.New("ERR invalid expire time in 'set' command")
			}
			switch strings.ToUpper(name) {
			case "EX":
				s.ex = n
			case "PX":
				s.px = n
			case "EXAT":
				s.exat = n
			case "PXAT":
				s.pxat = n
			}
		default:
			return s, fmt.Errorf("ERR heatsink: SET option %q is not supported on a mitigated key", name)
		}
	}
	return s, nil
}
