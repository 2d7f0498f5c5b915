package proxy

import (
	"bytes"
	"errors"
	"os"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// A dedicated session's round: the commands queued on its own upstream
// connections are written, then their replies read back in order, passed
// to the client as they come when large.

// drain sends every queued command and copies the replies to the client
// buffer in order. An upstream that fails is closed; every reply it owed
// becomes an error reply, so the client never hangs.
func (s *session) drain() {
	if len(s.pend) == 0 {
		return
	}
	s.p.arrivals.Handled(s.arr)
	if !s.p.cfg.Cluster && !s.dedicated {
		s.drainShared()
		return
	}
	s.sendQueued()
	if s.blocking && s.conn != nil {
		// While Redis holds a blocking command, a client that hangs up must
		// cancel it, as it would directly.
		defer s.watchClient()()
	}
	for i := range s.pend {
		s.takeReply(&s.pend[i])
	}
	// Every command is answered, so each has run. Not at the first reply:
	// a command sent to every master (FLUSHALL) had run on one of them
	// only, and another client's SET, written on a busy connection to a
	// master that had not yet read the FLUSHALL from the session's fresh
	// one, was wiped (1 in 2,000-12,000 tries under loopback load).
	s.releaseFence()
	for i, u := range s.ups {
		if u != nil && u.conn == nil {
			s.ups[i] = nil
		}
	}
	s.pend = s.pend[:0]
	s.rawlog = s.rawlog[:0]
	s.blocking = false
}

// sendQueued writes the commands queued on the session's upstream
// connections, once no fence holds them (order/fence.go), with a deadline for
// their replies (none for a blocking command, nor without a timeout).
func (s *session) sendQueued() {
	s.p.fences.Wait(s.fence)
	var now time.Time
	for _, u := range s.ups {
		if u == nil || u.queued == 0 {
			continue
		}
		switch {
		case s.p.cfg.Timeout <= 0: // no proxy-made timeout: Redis has none
		case s.blocking:
			u.deadline = time.Time{}
			u.conn.SetDeadline(u.deadline)
		default:
			if now.IsZero() {
				now = time.Now()
			}
			u.armDeadline(now, s.p.cfg.Timeout)
		}
		if err := u.w.Flush(); err != nil {
			s.fail(u, err)
		}
	}
	s.p.fences.Sent(s.fence)
}

// takeReply reads the reply owed for pd and appends it to the client's
// buffer (or an error reply, if its connection failed).
func (s *session) takeReply(pd *pend) {
	u := s.ups[pd.node]
	if u == nil || u.conn == nil {
		if !pd.swallow {
			s.cw.Buf = resp.AppendError(s.cw.Buf, errConnectionLost)
			s.p.observeRaw(nil, pd.key != "")
		}
		return
	}
	if pd.frames > 0 {
		// Its frames are its replies, RESP3 pushes or not: which they
		// are depends on the protocol in force when Redis ran it, not
		// on s.proto now (a HELLO or RESET later in the batch has
		// changed that already).
		if err := s.readFrames(u, int(pd.frames), pd.swallow); err != nil {
			s.replyFailed(u, pd, err)
			return
		}
		u.queued--
		return
	}
	if err := s.readReply(u, !pd.swallow); err != nil {
		s.invalidate(pd) // the write may have been applied
		s.replyFailed(u, pd, err)
		return
	}
	u.queued--
	s.invalidate(pd)
	pd.shed.done(s.p.cfg.Engine)
	if pd.undo.active && s.rep.IsError() {
		// Before swallow: a refused SELECT is taken back under
		// CLIENT REPLY OFF too.
		s.undoState(pd.undo)
	}
	if pd.swallow {
		return
	}
	if s.p.cfg.Cluster && s.pinned < 0 && !s.rep.Partial && s.rep.IsError() && (bytes.HasPrefix(s.rep.Line, []byte("MOVED ")) || bytes.HasPrefix(s.rep.Line, []byte("ASK "))) {
		if pd.streamed {
			s.redirectStreamed()
			return
		}
		s.redirect(s.rawlog[pd.off:pd.end])
		return
	}
	if pd.key != "" {
		s.p.observe(pd.key, 1, 0, len(s.rep.Raw)+s.streamed)
	}
	s.p.observeRaw(&s.rep, pd.key != "")
	s.cw.Write(s.rep.Raw)
	if len(s.cw.Buf) > flushAbove && !s.holding {
		// A client that does not read stops this session here,
		// before its replies fill the proxy's memory.
		s.cw.Flush()
	}
}

// replyFailed closes u, whose reply for pd did not come, and answers pd
// with the error.
func (s *session) replyFailed(u *upstream, pd *pend, err error) {
	s.fail(u, err)
	if !pd.swallow {
		s.cw.Buf = resp.AppendError(s.cw.Buf, s.p.upstreamError(s.p.topo.addr(int(pd.node)), err))
		s.p.observeRaw(nil, pd.key != "")
	}
}

// readFrames reads n frames of u, pushes or not, as the replies of one
// unsubscribe command, and appends them unless swallow. Other pushes
// (client-tracking invalidations) are passed on uncounted, as readReply
// passes them.
func (s *session) readFrames(u *upstream, n int, swallow bool) error {
	for n > 0 {
		if err := u.r.ReadReply(&s.rep); err != nil {
			return err
		}
		counted := !s.rep.IsPush() || isUnsubscribePush(s.rep.Raw)
		if counted {
			n--
		}
		if !swallow || !counted {
			s.cw.Write(s.rep.Raw)
		}
	}
	return nil
}

// watchClient reads ahead from the client while the session waits for a
// blocking command: what the client sends is kept for later, and if it
// hangs up, the session's upstream connections are closed, so Redis
// cancels the command rather than hand an element to nobody. The returned
// func stops the watch.
func (s *session) watchClient() (stop func()) {
	done := make(chan struct{})
	s.readingAhead = true
	go func() {
		defer close(done)
		for s.cr.Buffered() < 64<<10 {
			if err := s.cr.Fill(); err != nil {
				if !isTimeout(err) {
					for _, u := range s.ups {
						if u != nil && u.conn != nil {
							u.conn.Close()
						}
					}
				}
				return
			}
		}
	}()
	return func() {
		s.conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		s.readingAhead = false
		s.conn.SetReadDeadline(time.Time{})
	}
}

// readReply reads the next reply of u into s.rep, passing RESP3 pushes
// (client-side caching invalidations) straight to the client.
//
// A large reply is passed on as it arrives (when it is the client's, not
// read back by roundTrip), so a dedicated session holds at most about
// streamAbove of it whatever its size.
func (s *session) readReply(u *upstream, stream bool) error {
	stream = stream && !s.holding && s.conn != nil
	s.streamed = 0
	for {
		ok, err := u.r.TryReply(&s.rep)
		switch {
		case err != nil:
			return err
		case ok && s.rep.IsPush():
			s.cw.Write(s.rep.Raw)
			continue
		case ok:
			return nil
		}
		if stream && u.r.Pending() >= streamAbove {
			part := u.r.TakePartial()
			s.streamed += len(part)
			s.cw.Write(part)
			s.cw.Flush()
		}
		if err := u.r.Fill(); err != nil {
			return err
		}
	}
}

// fail closes a broken upstream; drain clears it from s.ups afterwards and
// the next command on that node dials again (replaying AUTH/HELLO/SELECT),
// unless the connection carried state that cannot be replayed: then the
// session ends after this batch's replies (see stateLost).
func (s *session) fail(u *upstream, err error) {
	if u.conn == nil {
		return
	}
	kind := "io"
	if errors.Is(err, os.ErrDeadlineExceeded) {
		kind = "timeout"
	}
	s.p.m.upstreamErrors.WithLabelValues(kind).Inc()
	u.conn.Close()
	u.conn = nil
	if s.stickyState || s.inTx || s.watching {
		s.stateLost = err
		if err == nil {
			s.stateLost = errors.New("upstream connection closed")
		}
	}
}

// errStateLost refuses to open a new upstream connection for a session
// whose connection state went with the old one.
var errStateLost = errors.New("connection state lost with the upstream connection; reconnect")

// armDeadline sets the read/write deadline only when the one set before is
// more than half used: setting a deadline costs a timer update, and most
// batches take microseconds.
func (u *upstream) armDeadline(now time.Time, timeout time.Duration) {
	if u.deadline.IsZero() || u.deadline.Sub(now) < timeout/2 {
		u.deadline = now.Add(timeout)
		u.conn.SetDeadline(u.deadline)
	}
}
