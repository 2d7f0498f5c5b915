// Package proxy is the heatsink proxy: a RESP proxy that forwards an
// application's commands to Redis (standalone or Cluster), reports key
// accesses to the node's agent and hands the commands on mitigated keys
// to the routing engine.
//
// Two ways of serving a client, chosen per connection:
//
//   - The event loop (loop_linux.go; plaintext or TLS upstream, standalone
//     or cluster) serves every client that sends only commands leaving no
//     connection state. One goroutine waits on one epoll set holding the
//     clients and the upstream connections; each round, the commands of
//     every client that sent something go to each Redis node in one write,
//     and each client gets its replies in one write. Forwarding copies a
//     command's bytes once and never re-encodes them.
//   - A session (session.go) is a goroutine per client. It serves the
//     clients the loop hands over (or all, with NoEventLoop): those that touch
//     connection state (SELECT, MULTI, WATCH, AUTH, CLIENT SETNAME), block
//     (BLPOP), or subscribe. A session that touched state gets its own
//     upstream connection per node, so that state stays the client's.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
)

// Observer receives key accesses (the node agent client, dataplane/counts).
// Observe must not block.
type Observer interface {
	Observe(policy, key string, reads, writes, bytes uint32)
}

// Config configures a Proxy.
type Config struct {
	// Upstreams are the Redis addresses (host:port); in cluster mode, seeds.
	Upstreams []string
	// Cluster selects Redis Cluster (slot-aware routing, MOVED/ASK).
	Cluster bool
	// Username and Password authenticate every upstream connection.
	Username, Password string
	// TLS, if set, wraps every upstream connection in TLS (see ClientTLS);
	// nil means plaintext. Credentials are sent only after the handshake.
	TLS *tls.Config
	// Dialer, if set, replaces Username, Password and TLS: the sidecar's
	// one way of reaching Redis (dataplane/upstream), shared with the
	// engine's clients, which reads rotated credentials and CA bundles at
	// each new connection while open ones stay as they were authenticated.
	Dialer *up.Dialer
	// Policy is "<namespace>/<name>" reported with each access.
	Policy string
	// Engine, if set, serves commands on mitigated keys.
	Engine *engine.Engine
	// Observer, if set, receives every keyed command's access.
	Observer Observer
	// DialTimeout bounds connecting to Redis (default 2s).
	DialTimeout time.Duration
	// Timeout, if set, bounds waiting for a reply from Redis, except for
	// blocking commands, which wait as long as the client asked; the
	// commands in flight then get an error. Zero (the default) waits as
	// long as Redis takes, as a direct connection does: Redis has no reply
	// timeout, and a long script is answered, with other clients getting
	// Redis' own BUSY meanwhile. The check is armed lazily, so a stall is
	// detected after between Timeout/2 and Timeout.
	Timeout time.Duration
	// MaxBuffered bounds the bytes the proxy holds for clients (replies not
	// yet written to them, commands not yet written to Redis) before it
	// stops reading clients that are not keeping up (default 64 MiB).
	// Clients that read their replies are still served.
	MaxBuffered int64
	// DrainTimeout bounds graceful shutdown (default 10s).
	DrainTimeout time.Duration
	// Registerer, if set, receives the proxy's metrics.
	Registerer prometheus.Registerer
	// Logger logs connection-level events; never Redis keys or values.
	Logger *slog.Logger
	// Limits bound client frames (DefaultClientLimits if zero). A zero
	// StreamAbove is 1 MiB: commands with a larger value are passed on as
	// they arrive (bigvalue.go).
	Limits resp.Limits
	// SharedConns is the number of multiplexed upstream connections per
	// RESP version that sessions share in standalone mode (default 2; the
	// event loop has its own, one per RESP version). Clients that touch
	// connection state (SELECT n, MULTI, AUTH, blocking commands, ...) get a
	// connection of their own instead. Negative disables multiplexing, and
	// with it the event loop.
	SharedConns int
	// Nodes, if set, is the table of nodes and the slot map the proxy
	// routes by (cluster mode: upstream.Nodes), shared with the sidecar's
	// other client; by default the proxy keeps one of its own from
	// Upstreams.
	Nodes *up.Nodes
	// NoEventLoop serves every client with a session goroutine. By default
	// (Linux, multiplexing on, plaintext or TLS) one event loop serves the
	// clients that send only stateless commands, and hands the others to
	// sessions; see loop_linux.go.
	NoEventLoop bool
	// Hold, if set, keeps Serve from accepting any client until it is
	// closed (the sidecar closes it once the routing table in force is
	// known, or its startup wait passed). Meanwhile connections complete in
	// the kernel's listen backlog and their commands wait in its socket
	// buffers: the proxy reads nothing it could serve wrongly and holds no
	// memory for them.
	Hold <-chan struct{}
	// Master, if set, is a master that moves (standalone mode: the master a
	// Sentinel names; see master.go): node 0 is its address, whatever
	// Upstreams says, and its switches and fences close every upstream
	// connection, the engine's included.
	Master *up.Master
}

// Proxy serves RESP clients. Create it with New, run it with Serve.
type Proxy struct {
	cfg  Config
	topo *topology
	m    *metrics
	log  *slog.Logger
	// families is cfg.Observer if it takes command families, else nil:
	// asserted once here rather than for every command.
	families FamilyObserver
	// refusals is the Observer as a RefusalObserver (nil if it is not).
	refusals RefusalObserver
	// outcomes is the Observer as an OutcomeObserver (nil if it is not).
	outcomes OutcomeObserver

	draining atomic.Bool
	mu       sync.Mutex
	sessions map[*session]struct{}
	wg       sync.WaitGroup
	ready    atomic.Bool

	// loop serves multiplexed clients (nil: sessions serve every client).
	loop *loop
	// arrivals orders sessions by their clients' bytes when the loop does
	// not run (order/arrivals_linux.go).
	arrivals *order.Arrivals
	// pools of multiplexed upstream connections by RESP version (2, 3).
	pools      [4]*pool
	sessionSeq atomic.Uint64
	// warm keeps connections ready for sessions that need their own.
	warm *warmPool
	// loopConns keeps the connections of the round trips the event loop
	// runs on goroutines (engine commands, INFO) between two commands.
	loopConns loopConns
	// fences hold other clients' commands while a command that gave its
	// client a connection of its own is unanswered (order/fence.go).
	fences order.Fences
	// dials spaces out dials to an address that refuses them.
	dials backoff
	// acceptErrs counts accept failures for rate-limited logging.
	acceptErrs atomic.Int64
}

// warmConns is how many idle connections per node the warm pool keeps.
const warmConns = 2

// controlTimeout bounds what the proxy asks Redis for itself (the AUTH
// and HELLO of a new connection, slot maps, readiness checks), never a
// client's command.
func (p *Proxy) controlTimeout() time.Duration {
	if p.cfg.Timeout > 0 {
		return p.cfg.Timeout
	}
	return 5 * time.Second
}

func (p *Proxy) pool(proto int) *pool {
	if proto == 3 {
		return p.pools[3]
	}
	return p.pools[2]
}

// New validates cfg and returns a proxy. It does not connect yet.
func New(cfg Config) (*Proxy, error) {
	if cfg.Master != nil {
		if cfg.Cluster {
			return nil, errors.New("proxy: a master that moves (Sentinel) does not apply to a Redis Cluster")
		}
		cfg.Upstreams = []string{cfg.Master.Addr()}
	}
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("proxy: no upstream address")
	}
	for _, a := range cfg.Upstreams {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("proxy: upstream %q: %w", a, err)
		}
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &up.Dialer{TLS: cfg.TLS, Username: cfg.Username, Password: cfg.Password}
	}
	if cfg.Timeout < 0 {
		cfg.Timeout = 0
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = 64 << 20
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Limits.MaxDepth == 0 {
		cfg.Limits = DefaultClientLimits()
	}
	if cfg.Limits.StreamAbove == 0 {
		cfg.Limits.StreamAbove = streamValueAbove // negative: every command held whole
	}
	p := &Proxy{cfg: cfg, m: newMetrics(cfg.Registerer), log: cfg.Logger, sessions: map[*session]struct{}{}}
	p.families, _ = cfg.Observer.(FamilyObserver)
	p.refusals, _ = cfg.Observer.(RefusalObserver)
	p.outcomes, _ = cfg.Observer.(OutcomeObserver)
	p.fences.Bound = p.m.orderBounds.Inc
	if cfg.SharedConns == 0 {
		cfg.SharedConns = 2
	}
	p.cfg = cfg
	p.pools[2], p.pools[3] = newPool(p, 2, max(cfg.SharedConns, 1)), newPool(p, 3, max(cfg.SharedConns, 1))
	p.warm = newWarmPool(p, warmConns)
	if cfg.Nodes == nil {
		cfg.Nodes = up.NewNodes(cfg.Upstreams, cfg.Dialer, p.controlTimeout())
	}
	p.cfg.Nodes = cfg.Nodes
	p.topo = &topology{cfg.Nodes}
	cfg.Nodes.OnError(func() { p.m.upstreamErrors.WithLabelValues("refresh").Inc() })
	if cfg.Master != nil {
		cfg.Master.Attach(p.topo.setMaster, p.masterClosed)
	}
	return p, nil
}

// Serve accepts clients on ln until ctx ends, then drains: it stops
// accepting, lets every session finish the pipeline it is serving, closes
// idle connections, and force-closes whatever remains after DrainTimeout.
// It returns nil after a graceful drain.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	if p.cfg.Cluster {
		rctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout*2)
		err := p.topo.refresh(rctx)
		cancel()
		if err != nil {
			// Keep serving: sessions route to the seed and follow MOVED, and
			// the map is retried on the first redirect.
			p.log.Warn("initial cluster slot map failed; following redirects", "err", err)
			p.m.upstreamErrors.WithLabelValues("refresh").Inc()
		}
	}
	// Sessions are ordered by arrival, among themselves and, with the
	// event loop, against the loop's clients (loop_arrivals_linux.go).
	p.arrivals = p.newArrivals()
	if loopEligible(&p.cfg) {
		if l, err := newLoop(p); err != nil {
			p.log.Warn("event loop unavailable; serving every client with its own goroutine", "err", err)
		} else {
			p.loop = l
			p.fences.Wake = func() { l.post(l.fenceDown) }
			l.orderSessions(p.arrivals)
			l.start()
		}
	}
	// Connections of their own for the first clients that need one, ready
	// before they ask (the event loop keeps spares of its own).
	p.warm.fill(0)
	if p.cfg.Hold != nil {
		select {
		case <-p.cfg.Hold:
		case <-ctx.Done():
			ln.Close()
			return p.shutdown()
		}
	}
	p.ready.Store(true)
	acceptDone := make(chan error, 1)
	go func() { acceptDone <- p.accept(ln) }()
	select {
	case <-ctx.Done():
	case err := <-acceptDone:
		p.shutdown()
		return err
	}
	ln.Close()
	<-acceptDone
	return p.shutdown()
}

func (p *Proxy) accept(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.draining.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if d, ok := acceptRetry(err, delay); ok {
				// Out of descriptors or memory: keep serving the
				// connections already open and try again later, as Redis
				// and Go's HTTP server do, rather than exit and drop them.
				if n := p.acceptErrs.Add(1); n == 1 || n%100 == 0 {
					p.log.Warn("accepting a client connection failed; retrying", "err", err, "retry_in", d.String(), "failures", n)
				}
				p.m.acceptErrors.Inc()
				delay = d
				time.Sleep(d)
				continue
			}
			return err
		}
		delay = 0
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		p.m.accepted.Inc()
		p.m.connections.Inc()
		if p.loop != nil && p.loop.adopt(c) {
			continue
		}
		if !p.startSession(p.acceptedSession(c)) {
			p.m.connections.Dec()
		}
	}
}

// acceptRetry decides whether an accept error is worth retrying and after
// how long: errors of exhausted resources (EMFILE, ENFILE, ENOBUFS,
// ENOMEM) and timeouts are, with a delay doubling from 5 ms to 1 s after
// prev; anything else ends serving.
func acceptRetry(err error, prev time.Duration) (time.Duration, bool) {
	var ne net.Error
	if !(errors.As(err, &ne) && ne.Timeout()) && !isResourceError(err) {
		return 0, false
	}
	return min(max(2*prev, 5*time.Millisecond), time.Second), true
}

// startSession serves s on a goroutine of its own; it reports false (and
// closes the connection) when the proxy is draining.
func (p *Proxy) startSession(s *session) bool {
	p.mu.Lock()
	if p.draining.Load() {
		p.mu.Unlock()
		s.conn.Close()
		return false
	}
	p.sessions[s] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		s.run()
		p.mu.Lock()
		delete(p.sessions, s)
		p.mu.Unlock()
		p.m.connections.Dec()
	}()
	return true
}

// shutdown wakes idle sessions (their blocking read of the next command
// returns) and waits for all of them.
func (p *Proxy) shutdown() error {
	p.ready.Store(false)
	t := time.NewTimer(p.cfg.DrainTimeout)
	defer t.Stop()
	loopClean := true
	if p.loop != nil {
		// First, so that no client is handed to a session once the
		// sessions are being waited for.
		loopClean = p.loop.shutdown(t.C)
	}
	p.mu.Lock()
	p.draining.Store(true)
	for s := range p.sessions {
		s.conn.SetReadDeadline(time.Now())
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); p.arrivals.Close(); close(done) }()
	select {
	case <-done:
		p.closePools()
		if !loopClean {
			return fmt.Errorf("proxy: connections force-closed after the %s drain timeout", p.cfg.DrainTimeout)
		}
		return nil
	case <-t.C:
	}
	p.mu.Lock()
	n := len(p.sessions)
	for s := range p.sessions {
		s.conn.Close()
		s.closeUpstreams()
	}
	p.mu.Unlock()
	<-done
	p.closePools()
	return fmt.Errorf("proxy: %d connections force-closed after the %s drain timeout", n, p.cfg.DrainTimeout)
}

func (p *Proxy) closePools() {
	p.pools[2].close()
	p.pools[3].close()
	p.warm.close()
	p.loopConns.close()
}

// Ready reports whether the proxy is serving and can reach Redis (a PING on
// a fresh connection to the first upstream, and in cluster mode a CLUSTER
// SLOTS: a user without +cluster|slots would be served by redirects alone,
// the engine's slot map never loaded, and only a log line would say so).
func (p *Proxy) Ready(ctx context.Context) error {
	if !p.ready.Load() {
		return errors.New("not serving")
	}
	u, err := p.dialRaw(ctx, p.topo.addr(0))
	if err != nil {
		return err
	}
	defer u.close()
	defer bound(ctx, u.conn, p.controlTimeout())()
	probes := [][][]byte{{[]byte("PING")}}
	if p.cfg.Cluster {
		probes = append(probes, [][]byte{[]byte("CLUSTER"), []byte("SLOTS")})
	}
	for _, c := range probes {
		u.w.Buf = resp.AppendArgs(u.w.Buf, c)
	}
	if err := u.w.Flush(); err != nil {
		return err
	}
	var r resp.Reply
	for range probes {
		if err := u.r.ReadReply(&r); err != nil {
			return err
		}
		if r.IsError() {
			return fmt.Errorf("redis: %s", r.Line)
		}
	}
	return nil
}

// dialRaw connects to addr and authenticates with the configured
// credentials. The connection's deadlines are cleared on success.
func (p *Proxy) dialRaw(ctx context.Context, addr string) (*upstream, error) {
	if p.cfg.Master != nil && p.cfg.Master.Fenced() {
		return nil, up.ErrFenced // a failover is promoting a replica (master.go)
	}
	if err := p.dials.check(addr, time.Now()); err != nil {
		return nil, err // Redis refused a dial moments ago: do not hammer it
	}
	u, err := p.dial(ctx, addr)
	if err == nil || ctx.Err() == nil {
		p.dials.result(addr, time.Now(), err)
	}
	if err == nil && p.cfg.Master != nil {
		if err = p.track(addr, u); err != nil {
			return nil, err
		}
	}
	return u, err
}

// dial connects to addr with the upstream Dialer (TLS complete, bounded
// by DialTimeout, before AUTH is written) and authenticates.
func (p *Proxy) dial(ctx context.Context, addr string) (*upstream, error) {
	c, err := p.cfg.Dialer.ConnWith(ctx, addr, p.cfg.DialTimeout, loopTransport)
	if err != nil {
		p.m.upstreamErrors.WithLabelValues("dial").Inc()
		return nil, err
	}
	setNoDelay(c)
	u := &upstream{conn: c, r: resp.NewReader(c, 16<<10, resp.ReplyLimits()), w: resp.NewWriter(c, 16<<10)}
	user, pass, err := p.cfg.Dialer.Credentials()
	if err != nil {
		c.Close()
		p.m.upstreamErrors.WithLabelValues("auth").Inc()
		return nil, err
	}
	if args := up.AuthArgs(user, pass); args != nil {
		c.SetDeadline(time.Now().Add(p.controlTimeout()))
		u.w.Buf = resp.AppendArgs(u.w.Buf, args)
		var r resp.Reply
		if err := u.w.Flush(); err == nil {
			err = u.r.ReadReply(&r)
		}
		if err != nil {
			c.Close()
			p.m.upstreamErrors.WithLabelValues("dial").Inc()
			return nil, err
		}
		if r.IsError() {
			c.Close()
			p.m.upstreamErrors.WithLabelValues("auth").Inc()
			return nil, fmt.Errorf("upstream AUTH: %s", strings.TrimSpace(string(r.Line)))
		}
		c.SetDeadline(time.Time{})
	}
	return u, nil
}

// metrics of the proxy. No label carries a key.
type metrics struct {
	connections    prometheus.Gauge
	accepted       prometheus.Counter
	dedicated      prometheus.Counter
	forwarded      prometheus.Counter
	engine         prometheus.Counter
	local          prometheus.Counter
	batches        prometheus.Counter
	protocolErrors prometheus.Counter
	upstreamErrors *prometheus.CounterVec
	redirects      *prometheus.CounterVec
	acceptErrors   prometheus.Counter
	pressure       prometheus.Counter
	// orderBounds counts waits of the Ordering rule ended by their bound
	// (order.FenceMax, order.Max) rather than by what they waited for.
	orderBounds prometheus.Counter
	// overhead is the proxy's own time per sampled command (see
	// loop_overhead_linux.go).
	overhead prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "heatsink", "proxy"
	cmds := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "commands_total",
		Help: "Client commands by path: forwarded raw, served by the engine (mitigated keys), or answered by the proxy itself (refusals, QUIT)."}, []string{"path"})
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connections", Help: "Open client connections."}),
		accepted:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "accepted_connections_total", Help: "Client connections accepted."}),
		dedicated: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dedicated_sessions_total",
			Help: "Client connections moved off the multiplexed upstream connections onto their own because they touched connection state."}),
		forwarded: cmds.WithLabelValues("forwarded"),
		engine:    cmds.WithLabelValues("engine"),
		local:     cmds.WithLabelValues("local"),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "batches_total",
			Help: "Pipelines forwarded (commands_total / batches_total is the mean pipeline depth)."}),
		protocolErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "protocol_errors_total",
			Help: "Client connections closed because of a malformed RESP frame."}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "upstream_errors_total",
			Help: "Upstream failures by kind (dial, auth, io, timeout, refresh)."}, []string{"kind"}),
		redirects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "redirects_total",
			Help: "Redis Cluster redirections followed (moved, ask)."}, []string{"kind"}),
		pressure: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "backpressure_total",
			Help: "Times the proxy's buffered replies and commands passed their bound and it stopped reading clients that do not keep up."}),
		orderBounds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ordering_bounds_reached_total",
			Help: "Waits of the Ordering rule (docs/proxy.md) ended by their bound, not by Redis' answer or the earlier client's command: commands read after may have reached Redis first."}),
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "accept_errors_total",
			Help: "Client connections that could not be accepted (out of file descriptors or memory); the proxy backs off and keeps serving."}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "command_overhead_seconds",
			Help: "The proxy's own time per forwarded command, excluding Redis' and the network's: from the start of the event loop's round that read it to the upstream write that sent it, plus from the start of the round that read its reply to the client write that delivered it. One command in 64 served by the event loop is sampled (docs/proxy.md).",
			// 1 µs to about 100 ms in steps of about 1.58 (10^0.2): a
			// p50 of tens of µs falls between close buckets.
			Buckets: prometheus.ExponentialBucketsRange(1e-6, 0.1, 26)}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.connections, m.accepted, m.dedicated, cmds, m.batches, m.protocolErrors, m.upstreamErrors, m.redirects, m.acceptErrors, m.pressure, m.orderBounds, m.overhead} {
			reg.MustRegister(c)
		}
	}
	return m
}

// setNoDelay turns Nagle off on c (under TLS, on its TCP connection): the
// proxy writes whole pipelines and wants them on the wire at once.
func setNoDelay(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if t, ok := c.(*tlsTransport); ok {
		c = t.Conn
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}

// DefaultClientLimits are the limits on client frames: Redis' own
// (proto-max-bulk-len 512 MiB, 64 KiB inline lines), so the proxy refuses
// exactly what Redis refuses, with Redis' error. --max-bulk follows a
// server configured with another proto-max-bulk-len.
func DefaultClientLimits() resp.Limits { return resp.DefaultLimits() }
