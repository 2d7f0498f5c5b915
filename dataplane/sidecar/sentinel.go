package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/sentinel"
)

// masterFollow is the sidecar's side of a Sentinel target: the follower
// that knows the master, and the dialer of the engine's go-redis client,
// which connects to that master and drops its connections to the old one
// on a switch. The proxy and the engine thus follow one view of the master
// (as they share one slot map in cluster mode): the engine's client is not
// a go-redis FailoverClient of its own, which would follow the Sentinels
// on a schedule of its own.
type masterFollow struct {
	f   *sentinel.Follower
	log *slog.Logger
	tls *tls.Config
	// switched is Config.OnMasterSwitch, fencedHook Config.OnMasterFence.
	switched   func(old, new string)
	fencedHook func()

	mu     sync.Mutex
	addr   string
	fenced bool
	p      *proxy.Proxy
	live   map[*engineConn]struct{}
}

// startFollow discovers the master through the Sentinels (waiting until
// one is found or ctx ends) and makes it cfg's upstream. creds and
// sentinelCreds, if not nil, are the mounted Redis and Sentinel
// credentials, read at each new connection (they replace cfg's static
// ones).
func startFollow(ctx context.Context, cfg *Config, creds, sentinelCreds *proxy.FileCredentials, log *slog.Logger) (*masterFollow, error) {
	if len(cfg.Upstreams) > 0 {
		return nil, errors.New("sidecar: upstream addresses and Sentinels are exclusive")
	}
	if cfg.Cluster {
		return nil, errors.New("sidecar: Sentinel does not apply to a Redis Cluster")
	}
	m := &masterFollow{log: log, tls: cfg.TLS, switched: cfg.OnMasterSwitch, fencedHook: cfg.OnMasterFence, live: map[*engineConn]struct{}{}}
	f, err := sentinel.New(sentinel.Options{
		Addrs: cfg.Sentinels, MasterName: cfg.SentinelMaster,
		Username: cfg.SentinelUsername, Password: cfg.SentinelPassword, Credentials: provider(sentinelCreds),
		DataUsername: cfg.Username, DataPassword: cfg.Password, DataCredentials: provider(creds), TLS: cfg.TLS,
		OnSwitch: m.onSwitch, OnFence: m.onFence, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	addr, err := f.Discover(ctx)
	if err != nil {
		f.Close()
		return nil, err
	}
	m.f, m.addr = f, addr
	cfg.Upstreams = []string{addr}
	log.Info("redis master found through Sentinel", "master", cfg.SentinelMaster, "address", addr, "sentinels", cfg.Sentinels)
	return m, nil
}

// replicas lists the master's replicas, as the Sentinels see them, for
// the engine's replica reads (engine.Options.Replicas).
func (m *masterFollow) replicas(ctx context.Context) ([]engine.ReplicaShard, error) {
	addrs, err := m.f.Replicas(ctx)
	if err != nil {
		return nil, err
	}
	return []engine.ReplicaShard{{Replicas: addrs}}, nil
}

// run follows the master into p until ctx ends.
func (m *masterFollow) run(ctx context.Context, p *proxy.Proxy) {
	m.mu.Lock()
	m.p = p
	addr, fenced := m.addr, m.fenced
	m.mu.Unlock()
	// A switch or fence between Discover and now was applied to m only.
	if fenced {
		p.Fence()
	} else if _, err := p.SetMaster(addr); err != nil {
		m.log.Error("proxy master switch failed", "err", err)
	}
	m.f.Run(ctx)
}

func (m *masterFollow) close() { m.f.Close() }

// onSwitch moves the proxy and the engine's connections to the new master
// (or back to the old one after a fence, old == addr).
func (m *masterFollow) onSwitch(old, addr string) {
	m.mu.Lock()
	m.addr, m.fenced = addr, false
	p := m.p
	victims := m.live
	if old != addr {
		m.live = map[*engineConn]struct{}{}
	} else {
		victims = nil // closed by the fence already
	}
	m.mu.Unlock()
	if p != nil {
		if _, err := p.SetMaster(addr); err != nil {
			m.log.Error("proxy master switch failed", "err", err)
		}
	}
	for c := range victims {
		_ = c.Conn.Close()
	}
	if m.switched != nil && old != addr {
		m.switched(old, addr)
	}
}

// onFence stops the proxy and the engine from using the master: a
// failover is promoting a replica (dataplane/sentinel).
func (m *masterFollow) onFence(string) {
	m.mu.Lock()
	m.fenced = true
	p := m.p
	victims := m.live
	m.live = map[*engineConn]struct{}{}
	m.mu.Unlock()
	if p != nil {
		p.Fence()
	}
	for c := range victims {
		_ = c.Conn.Close()
	}
	if m.fencedHook != nil {
		m.fencedHook()
	}
}

// dial is the engine's go-redis Dialer: it connects to the current
// master, whatever address go-redis asks for.
func (m *masterFollow) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	m.mu.Lock()
	addr, fenced := m.addr, m.fenced
	m.mu.Unlock()
	if fenced {
		return nil, errors.New("redis master failing over (Sentinel); retry")
	}
	nd := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	var c net.Conn
	var err error
	if m.tls != nil {
		c, err = proxy.DialTLS(ctx, nd, m.tls, addr)
	} else {
		c, err = nd.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.addr != addr || m.fenced {
		c.Close()
		return nil, errors.New("redis master switched while connecting")
	}
	ec := &engineConn{Conn: c, m: m}
	m.live[ec] = struct{}{}
	return ec, nil
}

// engineConn is one of the engine's connections; closing it leaves the
// set a switch closes.
type engineConn struct {
	net.Conn
	m *masterFollow
}

func (c *engineConn) Close() error {
	c.m.mu.Lock()
	delete(c.m.live, c)
	c.m.mu.Unlock()
	return c.Conn.Close()
}
