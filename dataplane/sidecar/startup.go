package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/dataplane/watch"
	"github.com/heatsink-dev/heatsink/injectlink"
)

// DefaultStartupWait is how long a new sidecar waits for the routing state
// in force before it serves without it (--startup-wait): the injector's
// wait, which its startup probe allows for (injectlink.StartupWait).
const DefaultStartupWait = injectlink.StartupWait

// startup holds the proxy's clients until the routing state in force is
// known (watch.Watcher.InForce), at most the startup wait, and answers the
// native sidecar's startup probe (/startupz) meanwhile: the kubelet starts
// the application's containers once it passes.
//
// Past the wait the sidecar serves without a table, loudly (an error log,
// heatsink_proxy_serving_unmitigated 1, /startupz's body), rather than keep
// refusing: a sidecar that never passes its startup probe is restarted by
// the kubelet and the application never starts, so an outage of the node
// agent (with no mounted file), or of the manager for a pod it has not yet
// announced to its agent, would become an outage of every new pod of the
// application. Served without a table, writes are not lost (a split
// counter's readers sum its base key too); reads of a split counter see its
// base key alone and replicated keys are written to their base only, until
// the first table arrives, which ends it at once.
type startup struct {
	begun time.Time
	wait  time.Duration
	// gate is closed when the proxy may serve.
	gate chan struct{}
	log  *slog.Logger
	m    startupMetrics

	mu     sync.Mutex
	opened bool
	// why is what /startupz and the logs say: what it waits for, or why it
	// serves.
	why         string
	inForce     bool
	unmitigated bool
}

type startupMetrics struct {
	inForce, unmitigated, waited prometheus.Gauge
}

func newStartup(reg prometheus.Registerer, wait time.Duration, log *slog.Logger) *startup {
	s := &startup{begun: time.Now(), wait: wait, gate: make(chan struct{}), log: log, m: startupMetrics{
		inForce: prometheus.NewGauge(prometheus.GaugeOpts{Name: "heatsink_proxy_routing_in_force",
			Help: "1 once the sidecar knows the routing state in force (a table from its node agent or the mounted file, or the mounted ConfigMap proving none was published); 0 before."}),
		unmitigated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "heatsink_proxy_serving_unmitigated",
			Help: "1 while the sidecar serves clients without the routing state in force (past --startup-wait): split counters read as their base key alone, replicated keys written to their base only."}),
		waited: prometheus.NewGauge(prometheus.GaugeOpts{Name: "heatsink_proxy_startup_wait_seconds",
			Help: "How long the sidecar held its clients at start, waiting for the routing state in force."}),
	}}
	reg.MustRegister(s.m.inForce, s.m.unmitigated, s.m.waited)
	return s
}

// follow opens the gate when inForce closes (src tells from what), or when
// the wait passes, whichever comes first, and then goes on until inForce
// closes; waitingFor describes the sources for the logs and /startupz. A
// nil inForce (no policy) opens it at once. It returns at once, following
// on a goroutine of its own.
func (s *startup) follow(ctx context.Context, inForce <-chan struct{}, src func() watch.Source, waitingFor string) {
	if inForce == nil {
		s.open(true, "no policy configured: nothing to wait for")
		return
	}
	s.mu.Lock()
	s.why = "waiting for the routing table in force from " + waitingFor
	s.mu.Unlock()
	go s.run(ctx, inForce, src, waitingFor)
}

func (s *startup) run(ctx context.Context, inForce <-chan struct{}, src func() watch.Source, waitingFor string) {
	if s.wait < 0 {
		s.open(false, "startup wait disabled (--startup-wait=0): serving before the routing table in force")
	} else {
		timer := time.NewTimer(s.wait)
		defer timer.Stop()
		select {
		case <-inForce:
			s.open(true, inForceBy(src()))
			return
		case <-timer.C:
			s.open(false, fmt.Sprintf("no routing table from %s within the %s startup wait: serving WITHOUT the routing table (split counters read as their base key alone, replicated keys written to their base only) until one arrives", waitingFor, s.wait))
		case <-ctx.Done():
			return
		}
	}
	select {
	case <-inForce:
		s.mu.Lock()
		s.inForce, s.unmitigated = true, false
		s.why = inForceBy(src()) + " (after serving without it)"
		s.mu.Unlock()
		s.m.inForce.Set(1)
		s.m.unmitigated.Set(0)
		s.log.Warn("routing table in force: mitigations apply again", "source", string(src()), "after", time.Since(s.begun).String())
	case <-ctx.Done():
	}
}

// open lets the proxy serve; inForce says whether the routing state in
// force is known.
func (s *startup) open(inForce bool, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened {
		return
	}
	s.opened, s.inForce, s.unmitigated, s.why = true, inForce, !inForce, why
	waited := time.Since(s.begun)
	s.m.waited.Set(waited.Seconds())
	if inForce {
		s.m.inForce.Set(1)
		s.log.Info("serving clients", "reason", why, "waited", waited.String())
	} else {
		s.m.unmitigated.Set(1)
		s.log.Error("serving clients without the routing table in force", "reason", why, "waited", waited.String())
	}
	close(s.gate)
}

// serveStartupz answers the startup probe: 503 while clients are held,
// 200 once the proxy serves (the body says whether under the routing table).
func (s *startup) serveStartupz(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	opened, unmitigated, why := s.opened, s.unmitigated, s.why
	s.mu.Unlock()
	switch {
	case !opened:
		http.Error(w, fmt.Sprintf("starting: %s (%.1fs of %s)", why, time.Since(s.begun).Seconds(), s.wait), http.StatusServiceUnavailable)
	case unmitigated:
		fmt.Fprintln(w, "ok, UNMITIGATED: "+why)
	default:
		fmt.Fprintln(w, "ok: "+why)
	}
}

// inForceBy says how the routing state in force became known.
func inForceBy(src watch.Source) string {
	switch src {
	case watch.SourceAgent:
		return "routing table in force from the node agent"
	case watch.SourceFile:
		return "routing table in force from the mounted file"
	case watch.SourceUnpublished:
		return "no routing table in force: the mounted routing ConfigMap shows none was published"
	}
	return "routing state in force from " + string(src)
}
