// Package detector is heatsink's per-node hot-key detector: it receives the
// sidecars' access counts over UDP (package wire), keeps one windowed
// heavy-hitter sketch per HotKeyPolicy (package sketch) and writes one
// HotKeyReport per policy for its node (package report decides when).
//
// It runs as a DaemonSet (cmd/heatsink detector) and can be embedded, one
// per simulated node, by the demo and tests: New binds the ingest socket,
// Run serves until the context ends.
package detector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector/wire"
	"github.com/heatsink-dev/heatsink/internal/scheme"
)

// The detector's least privilege: read policies, manage its own reports.
// +kubebuilder:rbac:groups=heatsink.dev,resources=hotkeypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=heatsink.dev,resources=hotkeyreports,verbs=list;watch;create;patch;delete

// Options configure a Detector.
type Options struct {
	// Config reaches the API server. Required.
	Config *rest.Config
	// NodeName is the node whose sidecars send to this detector. Required.
	NodeName string
	// ListenAddr is the UDP ingest address. Default ":7946".
	ListenAddr string
	// Clock is the detector's time: windows, rate limits and generatedAt.
	// Default: the real clock.
	Clock clock.WithTicker
	// Tick is how often reports are evaluated. Default 100ms, a tenth of the
	// default report interval, so a report is at most one tick late.
	Tick time.Duration
	// MemoryPerPolicy is each policy's sketch budget in bytes. Default 64 KiB.
	MemoryPerPolicy int
	// CandidateFraction of a threshold a key must reach on this node to be
	// reported. Default 0.1.
	CandidateFraction float64
	// Registerer receives the detector's metrics. Default: a private
	// registry (so several detectors can live in one process).
	Registerer prometheus.Registerer
	// MetricsAddr and ProbeAddr are the manager's metrics and health
	// endpoints. Default "0": disabled.
	MetricsAddr, ProbeAddr string
	// Logger. Default: controller-runtime's.
	Logger *logr.Logger
}

// Detector is one node's detector.
type Detector struct {
	opts    Options
	conn    net.PacketConn
	metrics *metrics
	log     logr.Logger

	mu       sync.RWMutex
	policies map[string]*policyState // by "<namespace>/<name>"

	client client.Client // set by Run
	ready  atomic.Bool

	batches, observations, evaluations atomic.Uint64
}

// New validates opts and binds the ingest socket, so Addr is known before
// Run (useful with port 0).
func New(opts Options) (*Detector, error) {
	if opts.Config == nil {
		return nil, errors.New("detector: Config is required")
	}
	if opts.NodeName == "" {
		return nil, errors.New("detector: NodeName is required")
	}
	if opts.ListenAddr == "" {
		opts.ListenAddr = fmt.Sprintf(":%d", wire.DefaultPort)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Tick <= 0 {
		opts.Tick = 100 * time.Millisecond
	}
	if opts.MemoryPerPolicy == 0 {
		opts.MemoryPerPolicy = 64 << 10
	}
	if opts.CandidateFraction == 0 {
		opts.CandidateFraction = 0.1
	}
	if opts.CandidateFraction < 0 || opts.CandidateFraction > 1 {
		return nil, fmt.Errorf("detector: CandidateFraction %v is not in (0, 1]", opts.CandidateFraction)
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	if opts.ProbeAddr == "" {
		opts.ProbeAddr = "0"
	}
	log := ctrl.Log.WithName("detector").WithValues("node", opts.NodeName)
	if opts.Logger != nil {
		log = *opts.Logger
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenPacket("udp", opts.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("detector: listen on %s: %w", opts.ListenAddr, err)
	}
	// A large receive buffer absorbs bursts of batches from many sidecars
	// while the reader is descheduled; the kernel caps it at rmem_max.
	if uc, ok := conn.(*net.UDPConn); ok {
		_ = uc.SetReadBuffer(4 << 20)
	}
	return &Detector{opts: opts, conn: conn, metrics: m, log: log, policies: map[string]*policyState{}}, nil
}

// Addr is the bound ingest address.
func (d *Detector) Addr() net.Addr { return d.conn.LocalAddr() }

// Stats are counters for tests and the demo.
type Stats struct {
	// Batches accepted and Observations (entries) counted.
	Batches, Observations uint64
	// Evaluations of the report loop.
	Evaluations uint64
}

// Stats returns the detector's counters.
func (d *Detector) Stats() Stats {
	return Stats{Batches: d.batches.Load(), Observations: d.observations.Load(), Evaluations: d.evaluations.Load()}
}

// Tracks reports whether the detector knows policy "<namespace>/<name>".
func (d *Detector) Tracks(policy string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.policies[policy]
	return ok
}

// Run watches policies, ingests batches and writes reports until ctx ends.
// It closes the ingest socket on return.
func (d *Detector) Run(ctx context.Context) error {
	defer d.conn.Close()
	mgr, err := ctrl.NewManager(d.opts.Config, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: d.opts.MetricsAddr},
		HealthProbeBindAddress: d.opts.ProbeAddr,
		Logger:                 d.log,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only this node's reports: a detector never reads others'.
			&v1alpha1.HotKeyReport{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelNode: d.opts.NodeName})},
		}},
		// Several detectors (simulated nodes) may share a process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("detector: manager: %w", err)
	}
	d.client = mgr.GetClient()
	if err := d.setupPolicyController(mgr); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(d.ingest)); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(d.reportLoop)); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(*http.Request) error {
		if !d.ready.Load() {
			return errors.New("policies not synced yet")
		}
		return nil
	}); err != nil {
		return err
	}
	go func() {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			d.ready.Store(true)
		}
	}()
	return mgr.Start(ctx)
}
