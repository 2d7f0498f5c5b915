package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// A session's pub/sub side: a subscribing client's connection becomes a raw
// pipe to Redis, and a tracking client gets Redis' invalidation pushes
// while the session waits for its next command.

// subscribe turns the session into a raw pipe to one upstream connection:
// pub/sub and MONITOR replies arrive unasked, so the proxy stops framing.
// In cluster mode SUBSCRIBE goes to the first node (Redis Cluster
// propagates PUBLISH to every node) and SSUBSCRIBE to its channel's node.
func (s *session) subscribe(c *classified) error {
	node := c.node // SSUBSCRIBE's channel is its key
	if c.key == nil && s.pinned >= 0 {
		node = s.pinned
	}
	raw := append([]byte(nil), s.cmd.Raw...)
	s.drain()
	if err := s.cw.Flush(); err != nil {
		return err
	}
	if s.fence == nil && s.pre == nil {
		// On its own connection already: fenced as a hand-off is. Raised
		// only now: a client that does not read the replies above must not
		// hold the others (while its session waits to write them, it does
		// not count as reading, order/arrivals_linux.go).
		s.fence = s.p.fences.RaiseUnsent()
	}
	u, err := s.upstream(node)
	if err != nil {
		s.localError(errUnreachable(s.p.topo.addr(node), err))
		return errQuit
	}
	s.drain() // the state replayed on a new connection
	if u.conn == nil {
		s.cw.Flush()
		return errQuit
	}
	u.conn.SetDeadline(time.Time{})
	// CLIENT REPLY is the proxy's until now; from here Redis applies it.
	if s.replyOff {
		u.w.Write([]byte("*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n"))
	} else if s.quiet {
		u.w.Write([]byte("*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$4\r\nSKIP\r\n"))
	}
	s.send(u, raw)
	u.w.Write(s.cr.Take())
	s.p.arrivals.Handled(s.arr)
	s.p.fences.Wait(s.fence)
	if err := u.w.Flush(); err != nil {
		return err
	}
	s.p.fences.Sent(s.fence)
	if s.fence != nil {
		// The fence is down once Redis has answered (at the latest after
		// order.FenceMax: with CLIENT REPLY OFF it does not answer).
		u.conn.SetReadDeadline(time.Now().Add(order.FenceMax))
		u.r.Fill()
		u.conn.SetReadDeadline(time.Time{})
		s.releaseFence()
	}
	s.nFwd++
	in := s.p.loop.pipeInput(s.conn)
	if in == nil {
		in = s.orderedPipeInput()
	} else if s.ordered {
		// The loop reads the client's input in its order now: it leaves
		// the order of arrivals, whose numbers it would no longer handle.
		s.p.arrivals.Remove(s.arr)
	}
	if in != nil {
		return s.orderedPipe(u, in)
	}
	if rest := u.r.Take(); len(rest) > 0 {
		if _, err := s.conn.Write(rest); err != nil {
			return err
		}
	}
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(u.conn, s.conn)
		halfClose(u.conn)
		done <- struct{}{}
	}()
	go func() { io.Copy(s.conn, u.conn); s.conn.Close(); done <- struct{}{} }()
	<-done
	s.conn.Close()
	u.conn.Close()
	<-done
	return errQuit
}

// halfClose tells Redis the client's EOF: TCP and TLS connections both
// can; anything else is closed.
func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// pipeIn is a piped client's input as the event loop reads it, in order
// with every other client's (loop_pipe_linux.go): chunks of it, each with
// the fence the loop raised for it. resume asks for the next chunk once
// one is written (false: the loop has stopped); stop ends the reading.
type pipeIn struct {
	chunks chan pipeChunk
	resume func() bool
	stop   func()
	// writing, if set, runs just before a chunk is written.
	writing func()
}

// pipeChunkMax is how much of a piped client's input one chunk holds.
const pipeChunkMax = 64 << 10

// pipeChunk is some of a piped client's input, or its end (eof).
type pipeChunk struct {
	b     []byte
	fence *order.Fence
	eof   bool
}

// orderedPipe is the pipe when its input is read in order with every
// other client's, by the event loop or by orderedPipeInput: the session
// writes each chunk it is given to Redis, and passes Redis' frames
// to the client, taking each chunk's fence down once a frame answers it
// (a message that merely arrives does not).
func (s *session) orderedPipe(u *upstream, in *pipeIn) error {
	var mu sync.Mutex
	var awaited *order.Fence // the fence of the chunk written last, until answered
	answered := func() {
		mu.Lock()
		f := awaited
		awaited = nil
		mu.Unlock()
		s.p.fences.Release(f)
	}
	quit := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for {
			var ch pipeChunk
			select {
			case ch = <-in.chunks:
			case <-quit:
				return
			}
			if ch.eof {
				halfClose(u.conn)
				return
			}
			// The chunk before, on this same connection, is answered
			// before this one anyway; the fences raised before this one
			// by others must be down.
			answered()
			s.p.fences.Wait(ch.fence)
			mu.Lock()
			awaited = ch.fence
			mu.Unlock()
			if in.writing != nil {
				in.writing()
			}
			_, err := u.conn.Write(ch.b)
			s.p.fences.Sent(ch.fence)
			if err != nil {
				answered()
				u.conn.Close()
				return
			}
			if !in.resume() {
				halfClose(u.conn)
				return
			}
		}
	}()
	s.pipeReplies(u, answered)
	s.conn.Close()
	u.conn.Close()
	close(quit)
	in.stop()
	<-wrote
	answered()
	// A chunk given and never written: its fence, bounded by order.Max
	// while unsent, comes down now.
	select {
	case ch := <-in.chunks:
		s.p.fences.Release(ch.fence)
	default:
	}
	return errQuit
}

// orderedPipeInput reads a piped client's input for a session that has a
// place in the order of arrivals (sessions only, order/arrivals_linux.go): each
// chunk waits for the sessions whose bytes came before, and gets a fence.
// It returns nil without arrivals.
func (s *session) orderedPipeInput() *pipeIn {
	if !s.ordered {
		return nil
	}
	a := s.p.arrivals
	in := &pipeIn{chunks: make(chan pipeChunk, 1)}
	next := make(chan struct{}, 1)
	quit := make(chan struct{})
	// The client counts as read again from the moment its commands are
	// written (Redis' answer to them, and what the client sends after it,
	// come later).
	in.writing = func() { a.Reading(s.arr, false) }
	in.resume = func() bool { next <- struct{}{}; return true }
	exited := make(chan struct{})
	// The session has closed the client's connection: the read returns.
	in.stop = func() { close(quit); <-exited }
	a.Piped(s.arr)
	a.Reading(s.arr, false)
	go func() {
		defer close(exited)
		buf := make([]byte, pipeChunkMax)
		for {
			n, err := a.Read(s.arr, buf)
			if n > 0 {
				a.Wait(s.arr)
				var f *order.Fence
				if buf[n-1] == '\n' { // as the loop does (loop_pipe_linux.go)
					f = s.p.fences.RaiseUnsent() // written by orderedPipe
				}
				a.Handled(s.arr)
				select {
				case in.chunks <- pipeChunk{b: append([]byte(nil), buf[:n]...), fence: f}:
				case <-quit:
					s.p.fences.Release(f)
					return
				}
				select {
				case <-next:
				case <-quit:
					return
				}
			}
			if err != nil {
				select {
				case in.chunks <- pipeChunk{eof: true}:
				case <-quit:
				}
				return
			}
		}
	}()
	return in
}

// pipeReplies passes u's frames to the client until either side fails,
// calling answered for each frame that answers a command.
func (s *session) pipeReplies(u *upstream, answered func()) {
	for {
		ok, err := u.r.TryReply(&s.rep)
		if err != nil {
			return
		}
		if ok {
			if !s.rep.Partial && !unasked(s.rep.Raw) {
				answered()
			}
			s.cw.Write(s.rep.Raw)
			if len(s.cw.Buf) < flushAbove {
				continue
			}
		}
		if s.cw.Flush() != nil {
			return
		}
		if ok {
			continue
		}
		if u.r.Pending() >= streamAbove {
			if _, err := s.conn.Write(u.r.TakePartial()); err != nil {
				return
			}
		}
		if u.r.Fill() != nil {
			return
		}
	}
}

// unasked reports a frame Redis sends a subscribed client without being
// asked: a message of a channel, pattern or shard channel, or a
// client-side caching invalidation. Anything else answers a command.
func unasked(raw []byte) bool {
	if len(raw) == 0 || raw[0] != '>' && raw[0] != '*' {
		return false
	}
	i := bytes.IndexByte(raw, '\n')
	if i < 0 {
		return false
	}
	rest := raw[i+1:]
	for _, kind := range [...]string{"$7\r\nmessage\r\n", "$8\r\npmessage\r\n", "$8\r\nsmessage\r\n", "$10\r\ninvalidate\r\n"} {
		if bytes.HasPrefix(rest, []byte(kind)) {
			return true
		}
	}
	return false
}

// relayPushes passes what Redis pushes on the session's connections
// (RESP3 client-tracking invalidations) to the client while the session
// waits for the client's next command, as a direct connection delivers
// them at once: a client-side cache that checks for invalidations before
// serving a value must see them without sending anything. The returned
// func stops the relay before the session uses its connections again.
func (s *session) relayPushes() (stop func()) {
	if !s.tracking || s.proto != 3 || len(s.pend) > 0 {
		return func() {}
	}
	var ups []*upstream
	for _, u := range s.ups {
		if u != nil && u.conn != nil {
			ups = append(ups, u)
		}
	}
	if len(ups) == 0 {
		return func() {}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // client writes
	failed := make([]error, len(ups))
	for i, u := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rep resp.Reply
			for {
				if err := u.r.ReadReply(&rep); err != nil {
					if !isTimeout(err) {
						failed[i] = err
					}
					return
				}
				if !rep.IsPush() {
					failed[i] = errors.New("reply without a request")
					return
				}
				mu.Lock()
				_, err := s.conn.Write(rep.Raw)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	return func() {
		for _, u := range ups {
			u.conn.SetReadDeadline(time.Unix(1, 0))
		}
		wg.Wait()
		for i, u := range ups {
			u.conn.SetReadDeadline(time.Time{})
			if failed[i] != nil {
				s.fail(u, failed[i])
			}
		}
		for i, u := range s.ups {
			if u != nil && u.conn == nil {
				s.ups[i] = nil
			}
		}
	}
}

// isUnsubscribePush reports a RESP3 push that answers UNSUBSCRIBE,
// PUNSUBSCRIBE or SUNSUBSCRIBE (its first element names it).
func isUnsubscribePush(raw []byte) bool {
	i := bytes.Index(raw, []byte("\r\n"))
	if i < 0 {
		return false
	}
	rest := raw[i+2:]
	for _, kind := range []string{"$11\r\nunsubscribe\r\n", "$12\r\npunsubscribe\r\n", "$12\r\nsunsubscribe\r\n"} {
		if bytes.HasPrefix(rest, []byte(kind)) {
			return true
		}
	}
	return false
}
