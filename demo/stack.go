package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/cpulimit"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/nodeagent"
	hswebhook "github.com/heatsink-dev/heatsink/webhook"
)

// Namespace and PolicyName of the demo's HotKeyPolicy.
const (
	Namespace  = "shop"
	PolicyName = "catalogue"
)

// nodes are the simulated nodes; each has one node agent and
// two proxies.
var nodes = []string{"node-a", "node-b"}

// fleetToken authenticates the demo's node agents to its manager.
const fleetToken = "demo-fleet-token"

// podAddr is the loopback address of proxy i's simulated pod: each pod
// sends its counts and reads its routing from an address of its own, as
// pods do, so the node agent can tell which pod is which.
func podAddr(i int) string { return fmt.Sprintf("127.0.1.%d", i+1) }

// stack is every running part of the demo. stop stops them all, in reverse
// order of start, and waits for each.
type stack struct {
	log   logr.Logger
	slog  *slog.Logger
	cp    *controlplane.ControlPlane
	redis *redisproc.Cluster
	// limits hold the Redis nodes to Config.ShardCPU (none without it).
	limits []*cpulimit.Group
	// masters are the cluster's masters; ranges[i] the slots masters[i]
	// serves and replicas[i] its replicas (none without replicas).
	masters  []string
	ranges   [][]slotRange
	replicas [][]string

	// Unavailable lists the stages that could not run, with the reason.
	unavailable []string

	hub   string   // the manager's fleet server
	fleet *hub.Hub // the fleet server itself (nil if unavailable)
	// managerMetrics is the manager's private registry (its reconcile
	// count is the calm scenario's number of passes).
	managerMetrics *prometheus.Registry
	nodeAgents     []string // node agent addresses, one per node
	proxies        []string // listen addresses, two per node
	metrics        []string // /metrics URLs of the proxies
	proxyNode      []int    // node index of each proxy

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
	for _, g := range s.limits {
		if err := g.Remove(); err != nil {
			s.log.Error(err, "remove a CPU cgroup")
		}
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

// startRedis starts the 3-master cluster, with replicas replicas per
// master when replicas > 0, each node held to cores of CPU when cores > 0,
// and learns which slots each master serves and which replicas it has.
func (s *stack) startRedis(ctx context.Context, replicas int, cores float64) error {
	if cores > 0 {
		if err := cpulimit.Available(); err != nil {
			return fmt.Errorf("shard CPU %v: %w", cores, err)
		}
	}
	var c *redisproc.Cluster
	var err error
	if replicas > 0 {
		c, err = redisproc.StartClusterReplicas(ctx, 3, replicas)
	} else {
		c, err = redisproc.StartCluster(ctx, 3)
	}
	if err != nil {
		return err
	}
	s.redis = c
	if cores > 0 {
		for _, srv := range c.Servers {
			g, err := cpulimit.New(fmt.Sprintf("heatsink-demo-%d-%d", os.Getpid(), srv.Port), cores)
			if err != nil {
				return err
			}
			s.limits = append(s.limits, g)
			if err := g.Add(srv.Pid()); err != nil {
				return err
			}
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: c.Addrs()[0], Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	ranges, reps := map[string][]slotRange{}, map[string][]string{}
	for _, sl := range slots {
		if len(sl.Nodes) == 0 {
			continue
		}
		m := sl.Nodes[0].Addr
		ranges[m] = append(ranges[m], slotRange{Lo: uint16(sl.Start), Hi: uint16(sl.End)})
		if _, ok := reps[m]; !ok {
			reps[m] = []string{}
			for _, n := range sl.Nodes[1:] {
				reps[m] = append(reps[m], n.Addr)
			}
		}
	}
	// Masters in the order the cluster's nodes were started (Redis picks
	// which nodes are masters when it has replicas).
	for _, srv := range c.Servers {
		if r, ok := ranges[srv.Addr]; ok {
			s.masters = append(s.masters, srv.Addr)
			s.ranges = append(s.ranges, r)
			s.replicas = append(s.replicas, reps[srv.Addr])
		}
	}
	if len(s.masters) != 3 {
		return fmt.Errorf("CLUSTER SLOTS lists %d masters serving slots, want 3", len(s.masters))
	}
	for i, r := range s.replicas {
		if len(r) != replicas {
			return fmt.Errorf("master %s has %d replicas in CLUSTER SLOTS, want %d", s.masters[i], len(r), replicas)
		}
	}
	return nil
}

// startManager runs the manager in this process: the admission webhooks and
// the HotKeyPolicy reconciler, as `heatsink manager` would.
func (s *stack) startManager(ctx context.Context, cfg Config) error {
	opts := s.cp.ManagerOptions()
	opts.Logger = s.log.WithName("manager")
	// Node agents of the simulated nodes run controllers in this process too.
	opts.Controller = ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}
	opts.Cache = managerCache()
	mgr, err := ctrl.NewManager(s.cp.Config, opts)
	if err != nil {
		return err
	}
	// No raw addresses: the demo's policy names its ClusterRedisTarget.
	if err := hswebhook.SetupHotKeyPolicyWebhook(mgr, targets.Options{}); err != nil {
		return err
	}
	s.managerMetrics = prometheus.NewRegistry()
	h, err := setupReconciler(mgr, cfg, s.managerMetrics)
	if err != nil {
		if !errors.Is(err, errStageUnavailable) {
			return err
		}
		s.unavailable = append(s.unavailable, "manager reconciler: "+err.Error())
	}
	s.goRun("manager", mgr.Start)
	checker := mgr.GetWebhookServer().StartedChecker()
	if err := poll(ctx, 30*time.Second, func() error { return checker(nil) }); err != nil {
		return err
	}
	s.fleet = h
	if h != nil {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if s.hub, err = h.Addr(actx); err != nil {
			return fmt.Errorf("fleet server: %w", err)
		}
	}
	return nil
}

// startNodeAgents starts one node agent per simulated node on a free
// loopback port, connected to the manager's fleet server.
func (s *stack) startNodeAgents() error {
	for _, node := range nodes {
		l := s.log.WithName("node-agent").WithValues("node", node)
		d, err := nodeagent.New(nodeagent.Options{NodeName: node, ListenAddr: "127.0.0.1:0", Manager: s.hub, Token: fleetToken, Logger: &l})
		if err != nil {
			return err
		}
		s.nodeAgents = append(s.nodeAgents, d.Addr().String())
		s.goRun("node-agent "+node, d.Run)
	}
	return nil
}

// startProxies starts two sidecar proxies per node, each a simulated pod
// (a Pod object, as the injector would have labelled it, with its own
// address) reporting to its node's agent and following the routing table
// through it.
func (s *stack) startProxies(ctx context.Context) error {
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
			if n < len(s.nodeAgents) {
				det = s.nodeAgents[n]
			}
			src := podAddr(len(s.proxies))
			if err := s.registerPod(ctx, fmt.Sprintf("app-%d", len(s.proxies)), nodes[n], src); err != nil {
				ln.Close()
				hl.Close()
				return err
			}
			cfg := sidecar.Config{
				Listener: ln, HTTPListener: hl, Upstreams: s.masters, Cluster: true,
				Policy: PolicyName, Namespace: Namespace, NodeAgent: det, SourceAddr: src,
				Logger: s.slog.With("proxy", strconv.Itoa(len(s.proxies))),
				// The demo starts its simulated pods before it applies the
				// policy (a real pod cannot be injected before), so there
				// is no table to wait for: serve at once.
				StartupWait: -1,
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

// registerPod creates the Pod object of a simulated pod on node with
// address ip, labelled for the demo's policy as the injector labels the
// pods it injects, and sets its status as a kubelet would: the manager
// watches such pods and tells the node's agent to accept counts from ip.
func (s *stack) registerPod(ctx context.Context, name, node, ip string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, Labels: map[string]string{v1alpha1.LabelPolicy: PolicyName}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "demo/app"}}},
	}
	if err := s.cp.Client.Create(ctx, pod); err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := s.cp.Client.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("pod %s status: %w", name, err)
	}
	return nil
}
