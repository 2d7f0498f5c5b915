package proxy

import (
	"context"
	"strconv"

	"github.com/heatsink-dev/heatsink/resp"
)

// engineCommand serves a command on a mitigated key through the engine and
// reports whether it did; false means "forward it raw" (a command or form
// the engine does not implement). Replies owed before it are drained first,
// so a pipeline's order holds even though the engine uses its own
// connections.
func (s *session) engineCommand(info cmdInfo, args [][]byte, key []byte) bool {
	e := s.p.cfg.Engine
	name := args[0]
	var op byte
	switch {
	case eqFold(name, "GET") && len(args) == 2:
		op = 'g'
	case eqFold(name, "SET") && len(args) >= 3:
		for _, a := range args[3:] {
			if eqFold(a, "GET") {
				return false // SET ... GET returns the old value: forwarded raw
			}
		}
		op = 's'
	case (eqFold(name, "INCR") || eqFold(name, "DECR")) && len(args) == 2:
		op = 'i'
	case (eqFold(name, "INCRBY") || eqFold(name, "DECRBY")) && len(args) == 3:
		op = 'i'
	case eqFold(name, "DEL") && len(args) == 2:
		op = 'd'
	default:
		return false
	}
	s.drain()
	k := string(key)
	ctx, cancel := context.WithTimeout(context.Background(), s.p.cfg.Timeout)
	defer cancel()
	b := s.cw.Buf
	switch op {
	case 'g':
		val, found, err := e.Get(ctx, k)
		switch {
		case err != nil:
			b = appendEngineError(b, err)
		case !found:
			b = resp.AppendNull(b, s.proto)
		default:
			b = resp.AppendBulk(b, val)
		}
		s.observe(k, 1, 0, len(val))
	case 's':
		opts := make([]any, 0, len(args)-3)
		for _, a := range args[3:] {
			opts = append(opts, string(a))
		}
		ok, err := e.Set(ctx, k, append([]byte(nil), args[2]...), opts...)
		switch {
		case err != nil:
			b = appendEngineError(b, err)
		case !ok:
			b = resp.AppendNull(b, s.proto)
		default:
			b = resp.AppendStatus(b, "OK")
		}
		s.observe(k, 0, 1, len(args[2]))
	case 'i':
		n := int64(1)
		if len(args) == 3 {
			v, err := strconv.ParseInt(string(args[2]), 10, 64)
			if err != nil {
				s.cw.Buf = resp.AppendError(b, "ERR value is not an integer or out of range")
				s.nEng++
				return true
			}
			n = v
		}
		if name[0] == 'D' || name[0] == 'd' {
			n = -n
		}
		v, err := e.IncrBy(ctx, k, n)
		if err != nil {
			b = appendEngineError(b, err)
		} else {
			b = resp.AppendInt(b, v)
		}
		s.observe(k, 0, 1, 8)
	case 'd':
		v, err := e.Del(ctx, k)
		if err != nil {
			b = appendEngineError(b, err)
		} else {
			b = resp.AppendInt(b, v)
		}
		s.observe(k, 0, 1, 0)
	}
	s.cw.Buf = b
	s.nEng++
	return true
}

// observe reports an access served by the engine: the detector must keep
// seeing a mitigated key, or the mitigation would end while it is hot.
func (s *session) observe(key string, reads, writes uint32, n int) {
	if o := s.p.cfg.Observer; o != nil {
		o.Observe(s.p.cfg.Policy, key, reads, writes, uint32(n))
	}
}

// appendEngineError turns an engine error into an error reply, keeping a
// Redis error's own code.
func appendEngineError(b []byte, err error) []byte {
	msg := err.Error()
	if len(msg) > 0 && (msg[0] < 'A' || msg[0] > 'Z') {
		msg = "ERR " + msg
	}
	return resp.AppendError(b, msg)
}
