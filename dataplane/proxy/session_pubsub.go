package proxy

import (
	"errors"
	"io"
	"sync"
	"time"

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
	s.p.fences.wait(s.fence)
	if err := u.w.Flush(); err != nil {
		return err
	}
	if s.fence != nil {
		// The fence is down once Redis has answered (at the latest after
		// fenceMax: with CLIENT REPLY OFF it does not answer).
		u.conn.SetReadDeadline(time.Now().Add(fenceMax))
		u.r.Fill()
		u.conn.SetReadDeadline(time.Time{})
		s.releaseFence()
	}
	if rest := u.r.Take(); len(rest) > 0 {
		if _, err := s.conn.Write(rest); err != nil {
			return err
		}
	}
	s.nFwd++
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(u.conn, s.conn)
		// Half-close so Redis sees the client's EOF; TCP and TLS
		// connections both can.
		if cw, ok := u.conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			u.conn.Close()
		}
		done <- struct{}{}
	}()
	go func() { io.Copy(s.conn, u.conn); s.conn.Close(); done <- struct{}{} }()
	<-done
	s.conn.Close()
	u.conn.Close()
	<-done
	return errQuit
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
