//go:build linux

package proxy

import (
	"golang.org/x/sys/unix"

	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
)

// checkGen refuses, on the loop's goroutine, a descriptor dialed before a
// master switch (see master.go): it is closed and err says why.
func (p *Proxy) checkGen(gen uint64, fd int, err error) error {
	if err == nil && p.masterGen() != gen {
		unix.Close(fd)
		return up.ErrSwitched
	}
	return err
}

// switchMaster closes, on the loop's goroutine, every open connection to
// the master that moved (node 0; upstream.Master.Switch): the commands they owe get an
// error, the next ones dial the new master. Connections still being dialed
// are refused when their dial completes (checkGen).
func (l *loop) switchMaster() {
	if len(l.ups) > 0 {
		for _, u := range l.ups[0] {
			if u != nil && u.fd >= 0 {
				l.failUp(u, up.ErrSwitched)
			}
		}
	}
	for _, u := range append([]*lupstream(nil), l.excls...) {
		if u.node == 0 && u.fd >= 0 {
			l.failUp(u, up.ErrSwitched)
		}
	}
	if len(l.spares) > 0 {
		for v := range l.spares[0] {
			for _, u := range append([]*lupstream(nil), l.spares[0][v]...) {
				if u.fd >= 0 {
					l.closeUp(u)
				}
			}
		}
		if !l.draining {
			l.fillSpares(0, 2)
		}
	}
}

func (l *loop) switchMasterAsync() { l.post(l.switchMaster) }
