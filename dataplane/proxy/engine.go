package proxy

import (
	"bytes"
	"context"
	"strconv"
	"sync"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing"
)

// anyMitigated reports whether a multi-key command names a mitigated key.
// With an empty table it costs one atomic load.
func anyMitigated(e Engine, _ cmdInfo, args [][]byte) bool {
	if len(e.Table().Entries) == 0 {
		return false
	}
	found := false
	engine.ForEachKey(args, func(i int) bool {
		found = e.Lookup(unsafeString(args[i]))
		return !found
	})
	return found
}

// mitigated handles a command that names at least one mitigated key: it is
// served through the engine (handled), refused with an error reply
// (handled), or left to be forwarded raw (not handled), in which case inval
// lists the mitigated keys whose cached copy a raw write must drop.
func (s *session) mitigated(_ cmdInfo, args [][]byte) (handled bool, inval []string) {
	d, inval := classifyMitigated(s.p.cfg.Engine, args, s.inTx || s.pinPending)
	if d.Op == engine.OpRaw || !s.execEngine(d, args) {
		return false, inval
	}
	return true, nil
}

// classifyMitigated decides what to do with a command that names a
// mitigated key: engine.Classify's decision, the same the go-redis hook
// (redishook) takes (see the compatibility table in docs/proxy.md). A
// command to forward raw has Op OpRaw; for a write, inval lists the
// mitigated keys whose cached copy must be dropped once Redis applied it.
func classifyMitigated(e Engine, args [][]byte, inTx bool) (d engine.Decision, inval []string) {
	t := e.Table()
	d = engine.Classify(args, func(k string) (*routing.Entry, bool) {
		if !e.Lookup(k) {
			return nil, false
		}
		return t.Lookup(k), true
	}, inTx)
	if d.Class == engine.ClassNone {
		d.Op = engine.OpRaw
		return d, nil
	}
	if d.Write {
		engine.ForEachKey(args, func(i int) bool {
			if e.Lookup(unsafeString(args[i])) {
				inval = append(inval, string(args[i]))
			}
			return true
		})
	}
	return d, inval
}

// execEngine serves a command the engine handles (d.Op other than OpRaw),
// appending its reply. It reports false when the command is to be
// forwarded raw after all (malformed: Redis gives its own error and writes
// nothing).
func (s *session) execEngine(d engine.Decision, args [][]byte) bool {
	e := s.p.cfg.Engine
	t := e.Table()
	switch d.Op {
	case engine.OpRefuse:
		s.localError(d.Err)
	case engine.OpGet:
		s.engineRead(args[1], func(b, val []byte, found bool) []byte {
			if !found {
				return resp.AppendNull(b, s.proto)
			}
			return resp.AppendBulk(b, val)
		})
	case engine.OpStrlen:
		s.engineRead(args[1], func(b, val []byte, _ bool) []byte { return resp.AppendInt(b, int64(len(val))) })
	case engine.OpType:
		s.engineRead(args[1], func(b, _ []byte, found bool) []byte {
			if !found {
				return resp.AppendStatus(b, "none")
			}
			return resp.AppendStatus(b, "string")
		})
	case engine.OpMGet:
		s.mget(args[1:])
	case engine.OpExists:
		s.perKeyCount(args, func(k string) bool { return engine.ClassOf(t.Lookup(k)) == engine.ClassCounter && e.Lookup(k) })
	case engine.OpDel:
		s.perKeyCount(args, e.Lookup)
	case engine.OpMSet:
		s.mset(args)
	case engine.OpSet:
		return s.engineSet(args)
	case engine.OpIncr:
		return s.engineIncr(args)
	default:
		return false
	}
	return true
}

// engineCtx bounds one engine call by the proxy's reply timeout.
func (s *session) engineCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.p.cfg.Timeout)
}

// engineRead answers a read of one key through the engine (Get), rendered
// by reply. Replies owed before it are drained first, so a pipeline's order
// holds even though the engine uses its own connections.
func (s *session) engineRead(key []byte, reply func(b, val []byte, found bool) []byte) {
	s.drain()
	ctx, cancel := s.engineCtx()
	defer cancel()
	k := string(key)
	val, found, err := s.p.cfg.Engine.Get(ctx, k)
	if err != nil {
		s.cw.Buf = appendEngineError(s.cw.Buf, err)
	} else {
		s.cw.Buf = reply(s.cw.Buf, val, found)
	}
	s.observe(k, 1, 0, len(val))
	s.nEng++
}

// engineSet maps SET, SETNX, SETEX and PSETEX to Engine.Set with options
// (engine.SetForm, shared with the go-redis hook). It returns false for a
// malformed form.
func (s *session) engineSet(args [][]byte) bool {
	if len(args) < 3 {
		return false
	}
	rest := make([]any, len(args)-2)
	for i, a := range args[2:] {
		rest[i] = string(a)
	}
	val, opts, ok := engine.SetForm(string(args[0]), rest)
	if !ok {
		return false
	}
	s.drain()
	ctx, cancel := s.engineCtx()
	defer cancel()
	k := string(args[1])
	v := []byte(val.(string))
	ok, err := s.p.cfg.Engine.Set(ctx, k, v, opts...)
	b := s.cw.Buf
	switch {
	case err != nil:
		b = appendEngineError(b, err)
	case eqFold(args[0], "SETNX") && ok:
		b = resp.AppendInt(b, 1)
	case eqFold(args[0], "SETNX"):
		b = resp.AppendInt(b, 0)
	case !ok:
		b = resp.AppendNull(b, s.proto)
	default:
		b = resp.AppendStatus(b, "OK")
	}
	s.cw.Buf = b
	s.observe(k, 0, 1, len(v))
	s.nEng++
	return true
}

// engineIncr maps INCR, DECR, INCRBY and DECRBY to Engine.IncrBy. It
// returns false for a malformed form.
func (s *session) engineIncr(args [][]byte) bool {
	name := args[0]
	by := eqFold(name, "INCRBY") || eqFold(name, "DECRBY")
	if by && len(args) != 3 || !by && len(args) != 2 {
		return false
	}
	n := int64(1)
	if by {
		v, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil {
			s.localError("ERR value is not an integer or out of range")
			return true
		}
		n = v
	}
	if name[0] == 'D' || name[0] == 'd' {
		n = -n
	}
	s.drain()
	ctx, cancel := s.engineCtx()
	defer cancel()
	k := string(args[1])
	v, err := s.p.cfg.Engine.IncrBy(ctx, k, n)
	if err != nil {
		s.cw.Buf = appendEngineError(s.cw.Buf, err)
	} else {
		s.cw.Buf = resp.AppendInt(s.cw.Buf, v)
	}
	s.observe(k, 0, 1, 8)
	s.nEng++
	return true
}

// mget answers MGET: mitigated keys through the engine (concurrently), the
// others with one raw GET each on the session's own upstream path (to
// their slot's master in cluster mode, so keys of different slots are fine
// once the command is split), assembled in order. A key holding another
// type reads as nil, as MGET does.
func (s *session) mget(keys [][]byte) {
	e := s.p.cfg.Engine
	var rawIdx []int
	var rawCmds, rawKeys [][]byte
	var engIdx []int
	for i, k := range keys {
		if e.Lookup(unsafeString(k)) {
			engIdx = append(engIdx, i)
			continue
		}
		rawIdx = append(rawIdx, i)
		rawKeys = append(rawKeys, k)
		rawCmds = append(rawCmds, resp.AppendArgs(nil, [][]byte{[]byte("GET"), k}))
	}
	replies := s.roundTrip(rawCmds, rawKeys)

	type result struct {
		val   []byte
		found bool
		err   error
	}
	res := make([]result, len(engIdx))
	ctx, cancel := s.engineCtx()
	defer cancel()
	var wg sync.WaitGroup
	for j, i := range engIdx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, f, err := e.Get(ctx, string(keys[i]))
			res[j] = result{v, f, err}
		}()
	}
	wg.Wait()

	elems := make([][]byte, len(keys))
	for j, i := range rawIdx {
		rep := replies[j]
		switch {
		case rep.IsError() && bytes.HasPrefix(rep.Line, []byte("WRONGTYPE")):
			elems[i] = resp.AppendNull(nil, s.proto)
		case rep.IsError():
			s.cw.Buf = append(s.cw.Buf, rep.Raw...)
			s.nEng++
			return
		default:
			elems[i] = rep.Raw
		}
		s.observe(string(keys[i]), 1, 0, len(rep.Raw))
	}
	for j, i := range engIdx {
		r := res[j]
		switch {
		case r.err != nil:
			s.cw.Buf = appendEngineError(s.cw.Buf, r.err)
			s.nEng++
			return
		case r.found:
			elems[i] = resp.AppendBulk(nil, r.val)
		default:
			elems[i] = resp.AppendNull(nil, s.proto)
		}
		s.observe(string(keys[i]), 1, 0, len(r.val))
	}
	s.cw.Buf = resp.AppendArrayHeader(s.cw.Buf, len(keys))
	for _, el := range elems {
		s.cw.Buf = append(s.cw.Buf, el...)
	}
	s.nEng++
}

// perKeyCount answers DEL, UNLINK or EXISTS over several keys by adding up
// one command per key: through the engine (Del, or Get for EXISTS) for the
// keys viaEngine selects, raw for the others.
func (s *session) perKeyCount(args [][]byte, viaEngine func(key string) bool) {
	e := s.p.cfg.Engine
	exists := eqFold(args[0], "EXISTS")
	var rawCmds, rawKeys, engKeys [][]byte
	for _, k := range args[1:] {
		if viaEngine(unsafeString(k)) {
			engKeys = append(engKeys, k)
			continue
		}
		rawKeys = append(rawKeys, k)
		rawCmds = append(rawCmds, resp.AppendArgs(nil, [][]byte{args[0], k}))
	}
	var total int64
	for i, rep := range s.roundTrip(rawCmds, rawKeys) {
		if rep.Type != ':' {
			s.cw.Buf = append(s.cw.Buf, rep.Raw...)
			s.nEng++
			return
		}
		v, _ := strconv.ParseInt(string(rep.Line), 10, 64)
		total += v
		if exists {
			s.observe(string(rawKeys[i]), 1, 0, 0)
		} else {
			s.observe(string(rawKeys[i]), 0, 1, 0)
		}
	}
	ctx, cancel := s.engineCtx()
	defer cancel()
	for _, kb := range engKeys {
		k := string(kb)
		var v int64
		var err error
		if exists {
			var found bool
			_, found, err = e.Get(ctx, k)
			if found {
				v = 1
			}
			s.observe(k, 1, 0, 0)
		} else {
			v, err = e.Del(ctx, k)
			s.observe(k, 0, 1, 0)
		}
		if err != nil {
			s.cw.Buf = appendEngineError(s.cw.Buf, err)
			s.nEng++
			return
		}
		total += v
	}
	s.cw.Buf = resp.AppendInt(s.cw.Buf, total)
	s.nEng++
}

// mset answers MSET with a mitigated key that needs the engine: every
// mitigated pair through Engine.Set, the others with one raw SET each (to
// their slot's master in cluster mode). It is not atomic across keys, and
// an error after some writes leaves those written (docs/proxy.md). Split
// counters need integer values; that is checked before anything is written.
func (s *session) mset(args [][]byte) {
	e := s.p.cfg.Engine
	t := e.Table()
	var rawCmds, rawKeys [][]byte
	var eng []int
	for i := 1; i+1 < len(args); i += 2 {
		k := args[i]
		if !e.Lookup(unsafeString(k)) {
			rawKeys = append(rawKeys, k)
			rawCmds = append(rawCmds, resp.AppendArgs(nil, [][]byte{[]byte("SET"), k, args[i+1]}))
			continue
		}
		if en := t.Lookup(unsafeString(k)); engine.ClassOf(en) == engine.ClassCounter {
			if _, err := strconv.ParseInt(string(args[i+1]), 10, 64); err != nil {
				s.localError("ERR heatsink: MSET on a key mitigated by " + engine.MitigationName(en) + " needs an integer value")
				return
			}
		}
		eng = append(eng, i)
	}
	for i, rep := range s.roundTrip(rawCmds, rawKeys) {
		if rep.IsError() {
			s.cw.Buf = append(s.cw.Buf, rep.Raw...)
			s.nEng++
			return
		}
		s.observe(string(rawKeys[i]), 0, 1, len(rawCmds[i]))
	}
	ctx, cancel := s.engineCtx()
	defer cancel()
	for _, i := range eng {
		k := string(args[i])
		v := append([]byte(nil), args[i+1]...)
		if _, err := e.Set(ctx, k, v); err != nil {
			s.cw.Buf = appendEngineError(s.cw.Buf, err)
			s.nEng++
			return
		}
		s.observe(k, 0, 1, len(v))
	}
	s.cw.Buf = resp.AppendStatus(s.cw.Buf, "OK")
	s.nEng++
}

// roundTrip sends raw commands (cmds[i] on keys[i]'s node) on the
// session's own upstream path after every reply owed before them, and
// returns their replies, copied, in order. RESP3 pushes that arrive with
// them go on to the client.
func (s *session) roundTrip(cmds, keys [][]byte) []resp.Reply {
	s.drain()
	if len(cmds) == 0 {
		return nil
	}
	mark := len(s.cw.Buf)
	for i, c := range cmds {
		node := 0
		if s.p.cfg.Cluster {
			node = s.p.topo.nodeOf(slotOf(keys[i]))
		}
		s.forward(node, c, false, "")
	}
	s.drain()
	got := append([]byte(nil), s.cw.Buf[mark:]...)
	s.cw.Buf = s.cw.Buf[:mark]
	r := resp.NewReader(bytes.NewReader(got), len(got), resp.DefaultLimits())
	out := make([]resp.Reply, 0, len(cmds))
	for len(out) < len(cmds) {
		var rep resp.Reply
		if err := r.ReadReply(&rep); err != nil {
			// Cannot happen: these bytes were parsed once already.
			line := "ERR heatsink proxy: unreadable upstream reply"
			rep = resp.Reply{Type: '-', Line: []byte(line), Raw: resp.AppendError(nil, line)}
		}
		if rep.IsPush() {
			s.cw.Write(rep.Raw)
			continue
		}
		rep.Raw = append([]byte(nil), rep.Raw...)
		rep.Line = append([]byte(nil), rep.Line...)
		out = append(out, rep)
	}
	return out
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
