package proxy

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Large values. A client command with a bulk argument over streamValueAbove
// (SET key <100 MB>, HSET key field <value>, RPUSH key <many elements>)
// is not held whole: the client's reader returns its head (the command
// name, the key, the arguments before the large one; resp.Limits.
// StreamAbove), the proxy classifies it from those, and passes the rest on
// to Redis as it arrives, a few hundred KiB at a time, on the client's own
// upstream connection, so no other client's command can land inside the
// half-written frame. The event loop hands such a client to a session
// (loop.command), which becomes dedicated, as for a command that touches
// connection state. Memory stays a few hundred KiB per such client
// whatever the value's size, up to Redis' 512 MiB; a client that hangs up
// mid-value leaves nothing: the upstream connection that got part of the
// frame is closed (Redis drops the partial command with it), never reused.
//
// A command is streamed when what the proxy needs to route it is in its
// head: it is unknown to the proxy (it looks at no key of it), or a plain
// command whose keys all come before the large argument (every command
// that carries a value: the key comes first). The others are held whole,
// as before, up to holdMax (half of Config.MaxBuffered), and refused above
// it (held whole, a 512 MiB argument would exceed the sidecar's memory;
// holding costs several times the command's size while its buffer grows
// and it is copied to the upstream connection): a command whose
// keys follow the large argument (MSET k1 <big> k2 v2), a script (EVAL's
// keys follow the script), a blocking or pub/sub command, one whose route
// is not forwarding (SCRIPT LOAD in a cluster goes to every master).
//
// Mitigated keys: a command that the engine would send raw (a cached key,
// a typed write on a replicated key) is streamed, and the key's cached
// copy dropped once Redis answered. One the engine serves itself (a SET
// of a replicated or split key must reach every copy) needs the value in
// memory: it is held whole up to engineValueMax and refused above it
// (docs/proxy.md, Memory).

const (
	// streamValueAbove is the size of a bulk argument (or of a command's bytes
	// before an argument) from which the command is streamed.
	streamValueAbove = 1 << 20
	// engineValueMax is the largest value the engine takes for a
	// mitigated key: it holds it whole and may write it to several keys.
	engineValueMax = 4 << 20
)

// bigAction is how a session serves a streamed command.
type bigAction uint8

const (
	bigStream bigAction = iota
	bigHold
	bigRefuse
)

// bigCommand prepares the streamed command s.cmd for handle: it returns
// the arguments to classify it by (its head, padded to its argument count
// with nil) and ok; or, for a command to be held whole, reads it whole and
// returns its arguments; or, for one refused, drops its rest, answers the
// refusal, and returns ok false. An error ends the session.
func (s *session) bigCommand() (args [][]byte, ok bool, err error) {
	args = s.bigArgs()
	act, msg := s.bigRoute(args)
	switch act {
	case bigHold:
		if !s.cr.HoldWhole() {
			return nil, false, errors.New("proxy: a streamed command could not be held whole")
		}
		if err := s.cr.ReadCommand(&s.cmd); err != nil {
			return nil, false, err
		}
		return s.cmd.Args, true, nil
	case bigRefuse:
		if err := s.cr.SkipRest(); err != nil {
			return nil, false, err
		}
		s.localError(msg)
		return nil, false, nil
	}
	return args, true, nil
}

// bigArgs is the streamed command's head arguments followed by nil for
// each argument still to come, so that argument counts are right.
func (s *session) bigArgs() [][]byte {
	s.padded = append(s.padded[:0], s.cmd.Args...)
	for len(s.padded) < s.cmd.Argc {
		s.padded = append(s.padded, nil)
	}
	return s.padded
}

// bigRoute decides how the streamed command whose padded arguments are
// args is served (see the rules above); a refusal comes with its error.
// A shared session that streams becomes dedicated first.
func (s *session) bigRoute(args [][]byte) (bigAction, string) {
	info, known := command.Lookup(args[0])
	size := len(s.cmd.Raw) + s.cmd.Big
	if !keysInHead(info, known, args, len(s.cmd.Args)) {
		return s.holdUpTo(size, s.holdMax(), "its keys or route depend on the arguments after it")
	}
	if !s.p.cfg.Cluster && !s.dedicated {
		s.drain()
		s.dedicated = true
		s.p.m.dedicated.Inc()
	}
	c := s.p.classify(args, s.mode())
	if c.route.op != opForward || c.blocking {
		return s.holdUpTo(size, s.holdMax(), "its keys or route depend on the arguments after it")
	}
	if c.mitigated && c.decision.Op != engine.OpRaw {
		if size <= engineValueMax {
			return bigHold, ""
		}
		if s.p.refusals != nil {
			s.p.refusals.ObserveRefused(s.p.cfg.Policy, c.decision.Entry.Key)
		}
		return bigRefuse, "ERR heatsink: " + command.Upper(args[0]) + " with a value over " + mib(engineValueMax) +
			" on a key mitigated by " + engine.MitigationName(c.decision.Entry) + " is not supported"
	}
	return bigStream, ""
}

// holdMax is the largest command held whole that could have been
// streamed but for its routing: half of what the proxy buffers for
// clients, so that holding it (a few times its size, briefly) stays under
// the memory ceiling.
func (s *session) holdMax() int64 { return s.p.cfg.MaxBuffered / 2 }

// holdUpTo holds a command of size bytes whole if it is at most limit,
// and refuses it otherwise (why: the reason it cannot be streamed).
func (s *session) holdUpTo(size int, limit int64, why string) (bigAction, string) {
	if int64(size) <= limit {
		return bigHold, ""
	}
	return bigRefuse, "ERR heatsink proxy: " + command.Upper(s.cmd.Args[0]) + " with an argument of " + strconv.Itoa(size) +
		" bytes is held whole before it is sent (" + why + "), and is over the " + mib(int(limit)) + " the proxy holds of one command"
}

func mib(n int) string { return strconv.Itoa(n>>20) + " MiB" }

// keysInHead reports whether a command's keys all lie before index head
// of args (its padded arguments): an unknown command names no key the
// proxy looks at; a known one must be plain (one request, one reply; no
// script, no blocking), with keys at fixed places, all before head.
func keysInHead(info command.Info, known bool, args [][]byte, head int) bool {
	if !known {
		return true
	}
	if info.Kind != command.Plain || info.Blocking || info.Scripting || info.FirstIndex() < 0 {
		return false
	}
	ok := true
	info.ForEachKey(args, func(i int) bool {
		ok = i < head
		return ok
	})
	return ok
}

// forwardStreamed sends the streamed command s.cmd to node on the
// session's own connection as it arrives: the replies owed before it come
// first, then its head, then its rest chunk by chunk. It returns an error
// (the session ends) when the client goes or breaks the protocol
// mid-value; the upstream connection, holding part of a command, is then
// closed. A Redis that fails meanwhile answers the client an error once
// the client's rest is read (and dropped).
func (s *session) forwardStreamed(node int, c *classified, inval []string) error {
	swallow := s.quiet
	// The head is copied first: while drain waits for a blocking command
	// sent before, it reads ahead from the client (watchClient), which may
	// move the bytes the head points to.
	head := bytes.Clone(s.cmd.Raw)
	s.drain()
	u, err := s.upstream(node)
	if err != nil {
		if err := s.cr.SkipRest(); err != nil {
			return err
		}
		if !swallow {
			s.localError(errUnreachable(s.p.topo.addr(node), err))
		}
		return nil
	}
	if !u.deadline.IsZero() {
		// The client sets the pace of the transfer; drain arms the reply's
		// deadline once the command is all sent.
		u.deadline = time.Time{}
		u.conn.SetDeadline(u.deadline)
	}
	u.w.Write(head)
	werr := u.w.Flush()
	for werr == nil {
		b, done, err := s.cr.Chunk()
		if err != nil {
			u.conn.Close() // a partial command: never to be reused
			u.conn = nil
			return err
		}
		if _, werr = u.conn.Write(b); done {
			break
		}
	}
	if werr != nil {
		s.fail(u, werr)
		if err := s.cr.SkipRest(); err != nil {
			return err
		}
		s.invalidateKeys(inval) // the write may have been applied
		if !swallow {
			s.localError(s.p.upstreamError(s.p.topo.addr(node), werr))
		}
		return nil
	}
	u.queued++
	s.pend = append(s.pend, pend{node: int32(node), swallow: swallow, key: c.readKey, invalidate: inval, frames: c.frames, streamed: true})
	if !swallow {
		s.nFwd++
	}
	return nil
}

func (s *session) invalidateKeys(keys []string) {
	for _, k := range keys {
		s.p.cfg.Engine.Invalidate(k)
	}
}

// errResend answers a streamed command met by MOVED or ASK. Its code is
// heatsink's own, for the reason routing.ShedCode is: Redis Cluster
// answers TRYAGAIN during a resharding, but go-redis (Client, and per node
// ClusterClient) sends a whole pipeline again when its first command's
// error is TRYAGAIN, applying every other command of it again; no client
// library retries RESEND. The command was not applied (Redis redirected
// it), so the application may send it again.
const errResend = "RESEND heatsink proxy: the key's slot moved while its large value was sent; nothing was applied, send it again"

// redirectStreamed answers a MOVED or ASK to a streamed command, which
// the proxy cannot send again (it kept none of it), with errResend, after
// asking for a fresh slot map.
func (s *session) redirectStreamed() {
	s.p.topo.refreshAsync()
	s.cw.Buf = resp.AppendError(s.cw.Buf, errResend)
}
