package proxy

import (
	"bytes"
	"context"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// A session's cluster redirects: a MOVED or ASK reply sends the command
// again to the node it names.

// redirect follows MOVED/ASK for one command (after a resharding; rare) on
// a one-shot connection, since the session's connection to the target may
// still owe replies of this batch. It writes the final reply.
func (s *session) redirect(raw []byte) {
	for hop := 0; hop < 5; hop++ {
		line := string(s.rep.Line)
		ask := line[0] == 'A'
		f := splitFields(line)
		if len(f) != 3 {
			break
		}
		if ask {
			s.p.m.redirects.WithLabelValues("ask").Inc()
		} else {
			s.p.m.redirects.WithLabelValues("moved").Inc()
			s.p.topo.refreshAsync()
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.p.cfg.DialTimeout)
		u, err := s.p.dialRaw(ctx, f[2])
		cancel()
		s.keepProto()
		if err != nil {
			s.cw.Buf = resp.AppendError(s.cw.Buf, errRedirect(f[2], err))
			return
		}
		u.conn.SetDeadline(time.Now().Add(s.p.controlTimeout()))
		n := 1 + s.prelude.len()
		s.prelude.each(func(c []byte) { u.w.Write(c) })
		if ask {
			u.w.Write([]byte("*1\r\n$6\r\nASKING\r\n"))
			n++
		}
		u.w.Write(raw)
		err = u.w.Flush()
		for i := 0; err == nil && i < n; i++ {
			err = u.r.ReadReply(&s.rep)
		}
		if err != nil {
			u.close()
			s.cw.Buf = resp.AppendError(s.cw.Buf, errRedirect(f[2], err))
			return
		}
		if !(s.rep.IsError() && (bytes.HasPrefix(s.rep.Line, []byte("MOVED ")) || bytes.HasPrefix(s.rep.Line, []byte("ASK ")))) {
			s.cw.Write(s.rep.Raw)
			u.close()
			return
		}
		// Copy the reply line before the connection (and its buffer) goes.
		s.rep.Line = append([]byte(nil), s.rep.Line...)
		u.close()
	}
	s.cw.Buf = resp.AppendError(s.cw.Buf, errTooManyRedirects)
}

func splitFields(s string) []string {
	var out []string
	for _, f := range bytes.Fields([]byte(s)) {
		out = append(out, string(f))
	}
	return out
}
