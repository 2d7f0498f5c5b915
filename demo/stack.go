package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/detector"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	hswebhook "github.com/heatsink-dev/heatsink/webhook"
)

// Namespace and PolicyName of the demo's HotKeyPolicy.
const (
	Namespace  = "shop"
	PolicyName = "catalogue"
)

// nodes are the simulated nodes; each has one detector and two proxies.
var nodes = []string{"node-a", "node-b"}

// stack is every running part of the demo. stop stops them all, in reverse
// order of start, and waits for each.
type stack struct {
	log    logr.Logger
	slog   *slog.Logger
	cp     *controlplane.ControlPlane
	redis  *redisproc.Cluster
	ranges [][]slotRange

	// Unavailable lists the stages that could not run, with the reason.
	unavailable []string

	detectors []string // ingest addresses, one per node
	proxies   []string // listen addresses, two per node
	metrics   []string // /metrics URLs of the proxies
	proxyNode []int    // node index of each proxy

	mu      sync.Mutex
	cancels []context.CancelFunc
	waits   []chan error
	bgErrs  []error
}

// goRun runs fn until stop, remembering its error. Components do not stop
// with the caller's context: on Ctrl-C the demo stops the traffic first,
// reads the final counter and metrics through them, and only then stops
// them, newest first.
func (s *stack) goRun(name string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := fn(ctx)
		if err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.bgErrs = append(s.bgErrs, fmt.Errorf("%s stopped: %w", name, err))
			s.mu.Unlock()
			s.log.Error(err, "component stopped", "component", name)
		}
		done <- err
	}()
	s.mu.Lock()
	s.cancels = append(s.cancels, cancel)
	s.waits = append(s.waits, done)
	s.mu.Unlock()
}

// failures returns the errors of components that stopped on their own.
func (s *stack) failures() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.bgErrs...)
}

// stop stops every component, newest first, then Redis and the control
// plane. No process is left running.
func (s *stack) stop() {
	s.mu.Lock()
	cancels, waits := s.cancels, s.waits
	s.cancels, s.waits = nil, nil
	s.mu.Unlock()
	for i := len(cancels) - 1; i >= 0; i-- {
		cancels[i]()
		select {
		case <-waits[i]:
		case <-time.After(15 * time.Second):
			s.log.Info("a component did not stop within 15s; going on")
		}
	}
	if s.redis != nil {
		s.redis.Stop()
	}
	if s.cp != nil {
		if err := s.cp.Stop(); err != nil {
			s.log.Error(err, "stop control plane")
		}
	}
}

// startControlPlane starts etcd and kube-apiserver with the CRDs and the
// webhook configurations.
func (s *stack) startControlPlane() error {
	cp, err := controlplane.Start(controlplane.Options{Webhooks: true})
	if err != nil {
		return err
	}
	s.cp = cp
	return cp.CreateNamespace(context.Background(), Namespace)
}

// startRedis starts the 3-master cluster and learns which slots each master
// serves.
func (s *stack) startRedis(ctx context.Context) error {
	c, err := redisproc.StartCluster(ctx, 3)
	if err != nil {
		return err
	}
	s.redis = c
	rc := redis.NewClient(&redis.Options{Addr: c.Addrs()[0], Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	s.ranges = make([][]slotRange, len(c.Servers))
	for _, sl := range slots {
		if len(sl.Nodes) == 0 {
			continue
		}
		for i, srv := range c.Servers {
			if sl.Nodes[0].Addr == srv.Addr {
				s.ranges[i] = append(s.ranges[i], slotRange{Lo: uint16(sl.Start), Hi: uint16(sl.End)})
			}
		}
	}
	for i, r := range s.ranges {
		if len(r) == 0 {
			return fmt.Errorf("master %s serves no slot", c.Servers[i].Addr)
		}
	}
	return nil
}

// startManager runs the manager in this process: the admission webhooks and
// the HotKeyPolicy reconciler, as `heatsink manager` would.
func (s *stack) startManager(ctx context.Context, margin time.Duration) error {
	opts := s.cp.ManagerOptions()
	opts.Logger = s.log.WithName("manager")
	// Detectors of the simulated nodes run controllers in this process too.
	opts.Controller = ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}
	opts.Cache = managerCache()
	mgr, err := ctrl.NewManager(s.cp.Config, opts)
	if err != nil {
		return err
	}
	if err := hswebhook.SetupHotKeyPolicyWebhook(mgr); err != nil {
		return err
	}
	if err := setupReconciler(mgr, margin); err != nil {
		if !errors.Is(err, errStageUnavailable) {
			return err
		}
		s.unavailable = append(s.unavailable, "manager reconciler: "+err.Error())
	}
	s.goRun("manager", mgr.Start)
	checker := mgr.GetWebhookServer().StartedChecker()
	return poll(ctx, 30*time.Second, func() error { return checker(nil) })
}

// startDetectors starts one detector per simulated node on a free loopback
// UDP port.
func (s *stack) startDetectors() error {
	for _, node := range nodes {
		l := s.log.WithName("detector").WithValues("node", node)
		d, err := detector.New(detector.Options{Config: s.cp.Config, NodeName: node, ListenAddr: "127.0.0.1:0", Logger: &l})
		if err != nil {
			return err
		}
		s.detectors = append(s.detectors, d.Addr().String())
		s.goRun("detector "+node, d.Run)
	}
	return nil
}

// startProxies starts two sidecar proxies per node, each reporting to its
// node's detector and following the routing table through the API server.
func (s *stack) startProxies(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(s.cp.Config)
	if err != nil {
		return err
	}
	for n := range nodes {
		for i := 0; i < 2; i++ {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			addr := ln.Addr().String()
			hl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				ln.Close()
				return err
			}
			s.metrics = append(s.metrics, "http://"+hl.Addr().String()+"/metrics")
			det := ""
			if n < len(s.detectors) {
				det = s.detectors[n]
			}
			cfg := sidecar.Config{
				Listener: ln, HTTPListener: hl, Upstreams: s.redis.Addrs(), Cluster: true,
				Policy: PolicyName, Namespace: Namespace, Detector: det,
				Kube: kube, Logger: s.slog.With("proxy", strconv.Itoa(len(s.proxies))),
			}
			s.goRun("proxy "+addr, func(ctx context.Context) error { return sidecar.Run(ctx, cfg) })
			s.proxies = append(s.proxies, addr)
			s.proxyNode = append(s.proxyNode, n)
		}
	}
	// Ready when each answers PING through to Redis.
	for _, a := range s.proxies {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		err := poll(ctx, 30*time.Second, func() error { return c.Ping(ctx).Err() })
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("proxy %s not answering: %w", a, err)
		}
	}
	return nil
}

// clients returns one go-redis client per proxy, as an application pod
// would use its sidecar: a plain (non-cluster) client to 127.0.0.1.
func (s *stack) clients(poolSize int) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(s.proxies))
	for i, a := range s.proxies {
		out[i] = redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true, PoolSize: poolSize, MaxRetries: -1})
	}
	return out
}

// poll calls cond every 50ms until it returns nil or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", timeout, err)
		case <-t.C:
		}
	}
}

// progress prints what a long step is doing while it runs: an elapsed-time
// counter on a terminal, a start and an end line otherwise.
func progress(out io.Writer, live bool, what string, fn func() error) error {
	start := time.Now()
	fmt.Fprintf(out, "  • %s ...", what)
	if !live {
		fmt.Fprintln(out)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	if live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					fmt.Fprintf(out, "\r  • %s ... %ds", what, int(time.Since(start).Seconds()))
				}
			}
		}()
	}
	err := fn()
	close(done)
	wg.Wait()
	status := "ok"
	if err != nil {
		status = "FAILED"
	}
	if live {
		fmt.Fprintf(out, "\r  • %s ... %s (%.1fs)\n", what, status, time.Since(start).Seconds())
	} else {
		fmt.Fprintf(out, "  • %s: %s (%.1fs)\n", what, status, time.Since(start).Seconds())
	}
	return err
}
