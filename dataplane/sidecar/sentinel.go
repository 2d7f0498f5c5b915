package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/sentinel"
	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
)

// masterFollow is the sidecar's side of a Sentinel target: the follower
// that knows the master moves the one up.Master that both the proxy
// and the engine's go-redis client dial through, so they follow one view of
// the master (as they share one slot map in cluster mode) and a switch or
// fence closes both's connections at once. The engine's client is not a
// go-redis FailoverClient of its own, which would follow the Sentinels on a
// schedule of its own.
type masterFollow struct {
	f      *sentinel.Follower
	master *up.Master
	log    *slog.Logger
	dialer *up.Dialer
	// switched is Config.OnMasterSwitch, fencedHook Config.OnMasterFence.
	switched   func(old, new string)
	fencedHook func()
}

// startFollow discovers the master through the Sentinels (waiting until
// one is found or ctx ends). d is how the sidecar reaches Redis (its TLS
// and credentials); sentinelCreds, if not nil, are the mounted Sentinel
// credentials, read at each new connection (they replace cfg's static
// ones).
func startFollow(ctx context.Context, cfg *Config, d *up.Dialer, sentinelCreds *up.FileCredentials, log *slog.Logger) (*masterFollow, error) {
	if len(cfg.Upstreams) > 0 {
		return nil, errors.New("sidecar: upstream addresses and Sentinels are exclusive")
	}
	if cfg.Cluster {
		return nil, errors.New("sidecar: Sentinel does not apply to a Redis Cluster")
	}
	m := &masterFollow{log: log, dialer: d, switched: cfg.OnMasterSwitch, fencedHook: cfg.OnMasterFence}
	f, err := sentinel.New(sentinel.Options{
		Addrs: cfg.Sentinels, MasterName: cfg.SentinelMaster,
		Username: cfg.SentinelUsername, Password: cfg.SentinelPassword, Credentials: (&up.Dialer{Files: sentinelCreds}).Provider(),
		DataUsername: cfg.Username, DataPassword: cfg.Password, DataCredentials: d.Provider(), Dialer: d.Dial,
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
	// The follower calls back only from Run, so m is complete before it
	// can be switched or fenced.
	m.f, m.master = f, up.NewMaster(addr)
	cfg.Upstreams = []string{addr} // what the engine's client names (its dialer asks m.master)
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

// run follows the master until ctx ends.
func (m *masterFollow) run(ctx context.Context) { m.f.Run(ctx) }

func (m *masterFollow) close() { m.f.Close() }

// onSwitch moves every connection to the new master (or lifts a fence,
// old == addr).
func (m *masterFollow) onSwitch(old, addr string) {
	changed, unfenced, n := m.master.Switch(addr)
	switch {
	case changed:
		m.log.Info("upstream master switched", "from", old, "to", addr, "connections_closed", n)
		if m.switched != nil {
			m.switched(old, addr)
		}
	case unfenced:
		m.log.Info("upstream master resumed after a fence", "master", addr)
	}
}

// onFence stops the proxy and the engine from using the master: a
// failover is promoting a replica (dataplane/sentinel).
func (m *masterFollow) onFence(string) {
	fenced, n := m.master.Fence()
	if !fenced {
		return
	}
	m.log.Info("upstream master fenced: a failover is promoting a replica", "master", m.master.Addr(), "connections_closed", n)
	if m.fencedHook != nil {
		m.fencedHook()
	}
}

// dial is the engine's go-redis Dialer: it connects to the current
// master, whatever address go-redis asks for.
func (m *masterFollow) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	return m.master.Dial(ctx, m.dialer.Conn)
}
