// Package sidecar wires the heatsink sidecar together: the RESP proxy, the
// routing engine on a go-redis client, the routing table watcher, the
// node agent client and the HTTP endpoint (/metrics, /healthz, /readyz,
// /startupz). The
// `heatsink sidecar` command only parses flags into a Config and calls Run.
package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/counts"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
	"github.com/heatsink-dev/heatsink/dataplane/watch"
	"github.com/heatsink-dev/heatsink/injectlink"
	"github.com/heatsink-dev/heatsink/internal/version"
	"github.com/heatsink-dev/heatsink/routing"
)

// Config is the sidecar's configuration (flags / HEATSINK_* variables).
type Config struct {
	// Listen is the client address; ignored when Listener is set.
	Listen string
	// Listener, if set, is served instead of listening on Listen (for
	// in-process use).
	Listener  net.Listener
	Upstreams []string
	Cluster   bool
	// Sentinels, if set (instead of Upstreams), are the Redis Sentinels
	// that name the master of SentinelMaster; the proxy and the engine
	// follow it across failovers (sentinel.go). SentinelUsername and
	// SentinelPassword authenticate to the Sentinels; Username and
	// Password (or their files) to the master and replicas.
	Sentinels                          []string
	SentinelMaster                     string
	SentinelUsername, SentinelPassword string
	// SentinelUsernameFile and SentinelPasswordFile, if set, replace
	// SentinelUsername and SentinelPassword: the mounted Sentinel
	// credentials Secret, read at each new connection to a Sentinel, as
	// UsernameFile and PasswordFile are for Redis.
	SentinelUsernameFile, SentinelPasswordFile string
	// OnMasterSwitch, if set, is called after the sidecar moved to a new
	// master, and OnMasterFence after it stopped using the master because
	// a failover is promoting a replica (Sentinel mode).
	OnMasterSwitch func(old, new string)
	OnMasterFence  func()
	Policy         string
	Namespace      string
	RoutingFile    string
	// Node agent is host:port of the node's agent; empty disables reports.
	NodeAgent string
	Username  string
	Password  string
	// UsernameFile and PasswordFile, if set, replace Username and
	// Password: the mounted credentials Secret, read at each new
	// connection to Redis so that a rotated Secret applies without a
	// restart (upstream.FileCredentials).
	UsernameFile, PasswordFile string
	// TLS, if set, is used for every connection to Redis (the proxy's and
	// the engine's); build it with proxy.ClientTLS. nil means plaintext.
	TLS *tls.Config
	// Limits bound client frames (proxy.Config.Limits).
	Limits resp.Limits
	// NoEventLoop serves every client with a goroutine of its own
	// (proxy.Config.NoEventLoop).
	NoEventLoop bool
	// ReplyTimeout, if set, bounds waiting for a Redis reply
	// (proxy.Config.Timeout); zero waits as long as Redis takes.
	ReplyTimeout time.Duration
	// MaxMemory is the sidecar's memory ceiling: Go's soft memory limit
	// (the garbage collector works harder and returns memory to the system
	// as the heap nears it), and a quarter of it bounds what the proxy
	// buffers for clients before it stops reading those that do not keep
	// up. Zero means DefaultMaxMemory.
	MaxMemory int64
	// StartupWait bounds how long the proxy holds its clients at start
	// while the routing state in force is unknown (startup.go); zero means
	// DefaultStartupWait, a negative value serves at once.
	StartupWait time.Duration
	// HTTPAddress serves /metrics, /healthz, /readyz, /startupz; empty
	// disables it.
	HTTPAddress string
	// HTTPListener, if set, is used instead of listening on HTTPAddress.
	HTTPListener net.Listener
	// SourceAddr, if set, is the local IP the sidecar talks to its node
	// agent from (counts and routing). In a pod the kernel uses the pod's
	// address, which is how the agent knows the pod; several simulated pods
	// on one host (the demo) each need their own.
	SourceAddr string
	Logger     *slog.Logger
	// Registry receives every metric of the sidecar and is what /metrics
	// serves; a new registry if nil.
	Registry Registry
}

// Registry is a Prometheus registry: collectors in, metrics out.
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// Run serves until ctx ends, then drains.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	defer limitMemory(ctx, &cfg)()
	reg := registry(cfg)
	dialer, follow, err := reachRedis(ctx, &cfg, log)
	if err != nil {
		return err
	}
	if follow != nil {
		defer follow.close()
	}
	// The one table of nodes and slot map, read by the proxy and the
	// engine's client alike; built before both, so neither waits for the
	// other.
	nodes := up.NewNodes(cfg.Upstreams, dialer, controlTimeout(cfg))
	rc := engineClient(cfg, dialer, nodes, follow)
	defer rc.Close()
	eng := newEngine(rc, reg, dialer, follow)
	defer eng.Close()
	sm := newSidecarMetrics(reg)
	if cfg.StartupWait == 0 {
		cfg.StartupWait = DefaultStartupWait
	}
	st := newStartup(reg, cfg.StartupWait, log)

	pcfg := proxy.Config{
		Upstreams: cfg.Upstreams, Cluster: cfg.Cluster, Dialer: dialer, Nodes: nodes,
		Policy: cfg.Namespace + "/" + cfg.Policy, Engine: eng, Registerer: reg, Logger: log,
		Limits: cfg.Limits, NoEventLoop: cfg.NoEventLoop,
		Timeout: cfg.ReplyTimeout, MaxBuffered: cfg.MaxMemory / 4,
		Hold: st.gate,
	}
	if follow != nil {
		pcfg.Master = follow.master
	}
	var dc *counts.Client
	if cfg.NodeAgent != "" {
		dc, err = countsClient(cfg, reg)
		if err != nil {
			return err
		}
		defer dc.Close()
		pcfg.Observer = dc
	}
	p, err := proxy.New(pcfg)
	if err != nil {
		return err
	}
	if follow != nil {
		go follow.run(ctx)
	}

	w, err := startWatcher(ctx, cfg, eng, dc, sm, log)
	if err != nil {
		return err
	}
	if w == nil {
		st.follow(ctx, nil, nil, "")
	} else {
		st.follow(ctx, w.InForce(), w.InForceSource, sources(cfg))
	}

	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return err
		}
	}
	stopHTTP, err := serveHTTP(cfg, handler(p, reg, st))
	if err != nil {
		ln.Close()
		return err
	}
	defer stopHTTP()
	log.Info("heatsink sidecar serving", "listen", ln.Addr().String(), "upstreams", cfg.Upstreams, "cluster", cfg.Cluster)
	return p.Serve(ctx, ln)
}

// newEngine is the routing engine on rc, reaching replicas with d.
func newEngine(rc redis.UniversalClient, reg Registry, d *up.Dialer, follow *masterFollow) *engine.Engine {
	eopts := engine.Options{Registerer: reg, Dialer: d}
	if follow != nil {
		// Only the Sentinels know the master's replicas; the engine's
		// client dials the master alone.
		eopts.Replicas = follow.replicas
	}
	return engine.New(rc, eopts)
}

// countsClient reports key accesses to the node agent, its detector's
// statistics registered in reg.
// The proxy finds what the counts client reports beyond counts (move
// outcomes) by type assertion, so a signature that drifted would compile
// and silently report nothing.
var _ proxy.OutcomeObserver = (*counts.Client)(nil)

func countsClient(cfg Config, reg Registry) (*counts.Client, error) {
	dc, err := counts.NewClient(cfg.NodeAgent, counts.ClientOptions{LocalAddr: cfg.SourceAddr})
	if err != nil {
		return nil, fmt.Errorf("counts client: %w", err)
	}
	registerDetectorStats(reg, dc)
	return dc, nil
}

// limitMemory sets Go's soft memory limit to cfg.MaxMemory (its default
// if unset) and returns memory to the system until the returned func is
// called.
func limitMemory(ctx context.Context, cfg *Config) (stop func()) {
	if cfg.MaxMemory <= 0 {
		cfg.MaxMemory = DefaultMaxMemory()
	}
	debug.SetMemoryLimit(cfg.MaxMemory)
	rctx, stopReturning := context.WithCancel(ctx)
	go returnMemory(rctx, 5*time.Second)
	return stopReturning
}

// registry is cfg's registry, or a new one, with the process' and the
// build's collectors.
func registry(cfg Config) Registry {
	var reg Registry = prometheus.NewRegistry()
	if cfg.Registry != nil {
		reg = cfg.Registry
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(version.Collectors("sidecar")...)
	return reg
}

// reachRedis is how the sidecar reaches Redis, first of all: the one
// Dialer both of its clients use, and with Sentinels the follower of the
// master (it checks the master's ROLE with the Dialer's credentials before
// anything else can start, and sets cfg.Upstreams to the master).
func reachRedis(ctx context.Context, cfg *Config, log *slog.Logger) (*up.Dialer, *masterFollow, error) {
	dialer, err := newDialer(*cfg)
	if err != nil || len(cfg.Sentinels) == 0 {
		return dialer, nil, err
	}
	sentinelCreds, err := up.ReadFileCredentials(cfg.SentinelUsernameFile, cfg.SentinelPasswordFile)
	if err != nil {
		return nil, nil, fmt.Errorf("sentinel credentials files: %w", err)
	}
	follow, err := startFollow(ctx, cfg, dialer, sentinelCreds, log)
	if err != nil {
		return nil, nil, err
	}
	return dialer, follow, nil
}

// serveHTTP serves h on cfg's HTTP listener or address, if any, until the
// returned func is called.
func serveHTTP(cfg Config, h http.Handler) (stop func(), err error) {
	hl := cfg.HTTPListener
	if hl == nil && cfg.HTTPAddress == "" {
		return func() {}, nil
	}
	if hl == nil {
		if hl, err = net.Listen("tcp", cfg.HTTPAddress); err != nil {
			return nil, err
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(hl)
	return func() { srv.Close() }, nil
}

// dialTimeout bounds a dial to Redis and its TLS handshake, for the
// engine's connections (the go-redis default) and the Sentinel follower's.
const dialTimeout = 5 * time.Second

// newDialer is the sidecar's one way of reaching Redis (upstream.Dialer),
// for the proxy and the engine alike: TLS, and the credentials, from the
// mounted Secret if set (read once now, so that a file that cannot be read
// stops the start with its error, then at each new connection).
func newDialer(cfg Config) (*up.Dialer, error) {
	creds, err := up.ReadFileCredentials(cfg.UsernameFile, cfg.PasswordFile)
	if err != nil {
		return nil, err
	}
	return &up.Dialer{TLS: cfg.TLS, Timeout: dialTimeout, Username: cfg.Username, Password: cfg.Password, Files: creds}, nil
}

// controlTimeout bounds what the sidecar asks Redis for itself (slot
// maps), as the proxy's: the reply timeout, or 5 s.
func controlTimeout(cfg Config) time.Duration {
	if cfg.ReplyTimeout > 0 {
		return cfg.ReplyTimeout
	}
	return 5 * time.Second
}

// engineClient is the go-redis client the engine sends its commands
// through, dialing with d. In cluster mode it takes its slot map from
// nodes, the proxy's too (ClusterOptions.ClusterSlots, reloaded when the
// map changes): the sidecar keeps one slot map, so the proxy's raw
// connections and the engine never disagree about which node serves a
// slot while the cluster is resharded.
func engineClient(cfg Config, d *up.Dialer, nodes *up.Nodes, follow *masterFollow) redis.UniversalClient {
	uo := &redis.UniversalOptions{
		Addrs: cfg.Upstreams, IsClusterMode: cfg.Cluster, Username: cfg.Username, Password: cfg.Password,
		// The upstream Dialer, not TLSConfig: with TLSConfig go-redis
		// would keep the CA bundle read at start unless a server name is
		// fixed; the Dialer checks each handshake against the bundle as
		// it is then.
		Dialer: d.Dial, CredentialsProvider: d.Provider(),
	}
	sendOnce(uo)
	if follow != nil {
		// The follower's dialer connects to the current master (TLS
		// included) and drops the old master's connections on a switch.
		uo.Dialer = follow.dial
	}
	uo.Dialer = ejecting(uo.Dialer)
	if !cfg.Cluster {
		return redis.NewUniversalClient(uo)
	}
	co := uo.Cluster()
	co.ClusterSlots = nodes.ClusterSlots
	cc := redis.NewClusterClient(co)
	noResendOnNodes(cc)
	nodes.OnChange(func() { cc.ReloadState(context.Background()) })
	return cc
}

// startWatcher follows the routing table into the engine: from the node
// agent (the node agent address, over TCP), and from the mounted file. The
// sidecar holds no API credentials. Without a policy there is nothing to
// follow and the proxy only forwards and reports.
//
// The agent's answer names the counts version it reads, which dc (nil
// without an agent) then writes: an agent of the previous release rejects
// every batch of a later version.
func startWatcher(ctx context.Context, cfg Config, eng *engine.Engine, dc *counts.Client, sm *sidecarMetrics, log *slog.Logger) (*watch.Watcher, error) {
	if cfg.Policy == "" {
		log.Info("no policy configured: routing table not followed")
		return nil, nil
	}
	if cfg.NodeAgent == "" && cfg.RoutingFile == "" {
		return nil, errors.New("no node agent and no routing file: cannot follow the routing table")
	}
	opts := watch.Options{
		Agent: cfg.NodeAgent, Namespace: cfg.Namespace, Policy: cfg.Policy, File: cfg.RoutingFile,
		OnTable: func(t *routing.Table) { eng.SetTable(t); sm.table(t) },
		OnAgent: func(v int) {
			if dc != nil {
				dc.SetAgentVersion(v)
			}
		},
		OnReject: func(src watch.Source, err error) {
			sm.reject(src)
			log.Warn("routing table rejected; keeping the last good one", "source", string(src), "err", err)
		},
		Log: logr.FromSlogHandler(log.Handler()),
	}
	if cfg.SourceAddr != "" {
		ip := net.ParseIP(cfg.SourceAddr)
		if ip == nil {
			return nil, fmt.Errorf("SourceAddr %q is not an IP address", cfg.SourceAddr)
		}
		d := &net.Dialer{Timeout: watch.AgentDialTimeout, LocalAddr: &net.TCPAddr{IP: ip}}
		opts.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	w, err := watch.New(opts)
	if err != nil {
		return nil, err
	}
	go func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("routing watcher stopped", "err", err)
		}
	}()
	return w, nil
}

// sources names where the sidecar looks for its table, for the logs.
func sources(cfg Config) string {
	switch {
	case cfg.NodeAgent != "" && cfg.RoutingFile != "":
		return "node agent " + cfg.NodeAgent + " or file " + cfg.RoutingFile
	case cfg.NodeAgent != "":
		return "node agent " + cfg.NodeAgent + " (no routing file)"
	default:
		return "file " + cfg.RoutingFile + " (no node agent)"
	}
}

// handler serves /metrics, /healthz (the process is up), /readyz (the
// proxy serves and reaches Redis) and /startupz (the proxy serves: the
// routing state in force is known, or the startup wait passed; the native
// sidecar's startup probe).
func handler(p *proxy.Proxy, g prometheus.Gatherer, st *startup) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(injectlink.StartupPath, st.serveStartupz)
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := p.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
