package apps

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/fleetstack"
)

// The demo's stack, as `make demo` runs it: a kube-apiserver, the manager
// (reconciler and fleet server), two node agents (node-a, node-b) and four
// sidecars, two per node, each in a simulated pod of its own address, in
// front of the Redis of each upstream. The policy is the demo's: coalesce,
// local cache, replicate and split allowed, with thresholds low enough
// that every workload below is hot.
const (
	namespace      = "apps"
	readThreshold  = 50 // per second
	writeThreshold = 20 // per second
	token          = "t0ken"
)

var nodes = []string{"node-a", "node-b"}

// fleet is the control side, started once for the package (TestMain stops
// it).
type fleet struct {
	cp     *controlplane.ControlPlane
	agents []string // counts/routing address of each node's agent
	stop   func()
}

var (
	fleetOnce sync.Once
	theFleet  *fleet
	fleetErr  error
	podSeq    int
	podMu     sync.Mutex
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theFleet != nil {
		theFleet.stop()
	}
	os.Exit(code)
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	fleetOnce.Do(func() { theFleet, fleetErr = newFleet() })
	if fleetErr != nil {
		t.Fatalf("fleet: %v", fleetErr)
	}
	return theFleet
}

// newFleet starts the control side with the demo's two node agents.
func newFleet() (*fleet, error) {
	fs, err := fleetstack.Start(namespace, token, nodes...)
	if err != nil {
		return nil, err
	}
	f := &fleet{cp: fs.CP, stop: fs.Stop}
	for _, a := range fs.Agents {
		f.agents = append(f.agents, a.Counts)
	}
	return f, nil
}

// upstream is the Redis behind the sidecars.
type upstream struct {
	name    string
	cluster bool
	addrs   []string // every master
}

// stack is one upstream's policy and its four sidecars.
type stack struct {
	f        *fleet
	up       upstream
	policy   string
	sidecars []string // client addresses, node-a's first
	metrics  []string // their /metrics URLs
}

// demoPolicy is the demo's policy (demo.samplePolicy) for up, with its
// windows and thresholds shortened so that a test of seconds crosses them.
func demoPolicy(name string, up upstream) *v1alpha1.HotKeyPolicy {
	on := ptr.To(true)
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	p := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	p.Spec = v1alpha1.HotKeyPolicySpec{
		Mode:      v1alpha1.ModeEnforce,
		Target:    v1alpha1.RedisTarget{Addresses: up.addrs, Cluster: up.cluster},
		Keys:      v1alpha1.KeySelector{Include: []string{"*"}},
		Detection: v1alpha1.Detection{Window: d(2 * time.Second), ReportInterval: d(500 * time.Millisecond), TopK: 64},
		Thresholds: v1alpha1.Thresholds{ReadsPerSecond: readThreshold, WritesPerSecond: writeThreshold,
			SustainFor: d(time.Second), Cooldown: d(30 * time.Second), HysteresisPercent: 20},
		Capacity: v1alpha1.Capacity{PerShardWritesPerSecond: writeThreshold, HeadroomPercent: 25},
		Mitigations: v1alpha1.Mitigations{
			Coalesce:   v1alpha1.Coalesce{Enabled: on},
			LocalCache: v1alpha1.LocalCache{Enabled: on, TTL: d(time.Second), JitterPercent: 10},
			Replicate:  v1alpha1.Replicate{Enabled: on, MaxReplicas: 8},
			Split:      v1alpha1.Split{Enabled: on, MaxShards: 16, Epoch: d(2 * time.Second)},
		},
	}
	v1alpha1.SetDefaults(&p.Spec)
	return p
}

// startStack applies the demo's policy for up and starts four sidecars
// (two per node), each serving once it answers PING through to Redis.
func startStack(t *testing.T, up upstream) *stack {
	t.Helper()
	f := startFleet(t)
	ctx := context.Background()
	podMu.Lock()
	podSeq++
	policy := fmt.Sprintf("apps-%s-%d", up.name, podSeq) // -count=N runs each with its own policy
	podMu.Unlock()
	s := &stack{f: f, up: up, policy: policy}
	p := demoPolicy(s.policy, up)
	if err := f.cp.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.cp.Client.Delete(context.Background(), p) })
	for n := range nodes {
		for range 2 {
			s.startSidecar(t, n)
		}
	}
	for _, a := range s.sidecars {
		c := redis.NewClient(&redis.Options{Addr: a})
		eventually.True(t, 30*time.Second, "the sidecar answers PING", func() bool { return c.Ping(ctx).Err() == nil })
		c.Close()
	}
	return s
}

func (s *stack) startSidecar(t *testing.T, n int) {
	t.Helper()
	podMu.Lock()
	podSeq++
	seq := podSeq
	podMu.Unlock()
	ip := fmt.Sprintf("127.0.2.%d", seq)
	ctx := context.Background()
	po := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("app-%d", seq), Labels: map[string]string{v1alpha1.LabelPolicy: s.policy}},
		Spec:       corev1.PodSpec{NodeName: nodes[n], Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := s.f.cp.Client.Create(ctx, po); err != nil {
		t.Fatal(err)
	}
	po.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := s.f.cp.Client.Status().Update(ctx, po); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.f.cp.Client.Delete(context.Background(), po) })
	ln, hl := listen(t), listen(t)
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(sctx, sidecar.Config{
			Listener: ln, HTTPListener: hl, Upstreams: s.up.addrs, Cluster: s.up.cluster,
			Policy: s.policy, Namespace: namespace, NodeAgent: s.f.agents[n], SourceAddr: ip,
			// Pods start before their policy's first table, as in the demo.
			StartupWait: -1,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar: %v", err)
		}
	})
	s.sidecars = append(s.sidecars, ln.Addr().String())
	s.metrics = append(s.metrics, "http://"+hl.Addr().String()+"/metrics")
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// client is a go-redis client of sidecar i in its default configuration,
// as an application pod uses its sidecar: a ClusterClient when the Redis
// behind is a cluster (the sidecar presents itself as a one-node cluster).
func (s *stack) client(i int) redis.UniversalClient {
	if s.up.cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.sidecars[i]}})
	}
	return redis.NewClient(&redis.Options{Addr: s.sidecars[i]})
}

// moves records, for each key watched, every mitigation the policy's
// status listed for it while the workloads ran and the last reason given.
type moves struct {
	mu     sync.Mutex
	seen   map[string]map[string]bool
	reason map[string]string
	fams   map[string]string
}

func (s *stack) watchMoves(ctx context.Context) *moves {
	m := &moves{seen: map[string]map[string]bool{}, reason: map[string]string{}, fams: map[string]string{}}
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p := &v1alpha1.HotKeyPolicy{}
			if err := s.f.cp.Client.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: s.policy}, p); err != nil {
				continue
			}
			m.mu.Lock()
			for _, hk := range p.Status.HotKeys {
				if m.seen[hk.Key] == nil {
					m.seen[hk.Key] = map[string]bool{}
				}
				for _, mt := range hk.Mitigations {
					m.seen[hk.Key][string(mt)] = true
				}
				if hk.Reason != "" {
					m.reason[hk.Key] = hk.Reason
				}
				if len(hk.Families) > 0 {
					m.fams[hk.Key] = strings.Join(hk.Families, ",")
				}
			}
			m.mu.Unlock()
		}
	}()
	return m
}

// notHot is of's answer for a workload none of whose keys status listed.
const notHot = "not hot"

// of describes the moves of the keys containing sub: each key's
// mitigations ("none" for a hot key with none), families and reason.
func (m *moves) of(sub string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k, set := range m.seen {
		if !strings.Contains(k, sub) {
			continue
		}
		var ms []string
		for mt := range set {
			ms = append(ms, mt)
		}
		desc := "none"
		if len(ms) > 0 {
			desc = strings.Join(sortStrings(ms), "+")
		}
		if f := m.fams[k]; f != "" {
			desc += " [" + f + "]"
		}
		if r := m.reason[k]; r != "" {
			desc += " (" + r + ")"
		}
		out = append(out, k+": "+desc)
	}
	if len(out) == 0 {
		return notHot
	}
	return strings.Join(sortStrings(out), "; ")
}
