package proxy

import (
	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
)

// A master that moves (Redis Sentinel, standalone mode).
//
// With Config.Master the upstream address (node 0) is that master's, and
// the one registry of dataplane/upstream holds every connection dialed to
// it: the shared connections (sessions and the event loop), the warm and
// spare ones, those of sessions that touched connection state, and the
// engine's. A switch or a fence closes them all at once (see
// upstream.Master for why). Commands in flight on them get an error (they
// may or may not have been applied, as with any lost connection); a client
// whose connection state went with them is disconnected after its replies,
// as on any upstream loss, and reconnects. New connections go to the new
// master; while fenced, clients get an error at once, never a reply from
// the old master.
//
// The event loop owns its descriptors outright (takeFD), so they leave the
// registry (loopTLS, takeFD's close): masterClosed posts it a switch, and
// its dials carry the master generation they started under (masterGen),
// checked when they complete.

// track registers u's connection, dialed to addr, unless the master moved
// away from addr meanwhile: then it is closed and an error returned.
func (p *Proxy) track(addr string, u *upstream) error {
	tc, err := p.cfg.Master.Track(addr, u.conn)
	if err != nil {
		return err
	}
	u.conn = tc
	return nil
}

// masterClosed follows a switch or fence of the master into the event
// loop, which closes its own connections.
func (p *Proxy) masterClosed() {
	if p.loop != nil {
		p.loop.switchMasterAsync()
	}
}

// masterGen is the master's count of switches and fences (0 without one).
func (p *Proxy) masterGen() uint64 {
	if p.cfg.Master == nil {
		return 0
	}
	return p.cfg.Master.Gen()
}

// upstreamError is errUpstream, except while a failover is fenced: then the
// connection failed because the fence closed it, and the client is told
// so, not of a closed socket.
func (p *Proxy) upstreamError(addr string, err error) string {
	if p.cfg.Master != nil && p.cfg.Master.Fenced() {
		err = up.ErrFencedInFlight
	}
	return errUpstream(addr, err)
}
