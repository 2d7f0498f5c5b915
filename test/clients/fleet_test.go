package clients

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/fleetstack"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// The thresholds of every run's policy: low, so that the workload's reads
// of the hot key and increments of the counter (nHot and nIncr a round,
// within the 2 s window) are over them.
const (
	namespace      = "ns"
	readThreshold  = 5 // per second
	writeThreshold = 5 // per second
)

// fleet is heatsink's control side, real, in this process: a kube-apiserver
// and etcd, the manager (the HotKeyPolicy reconciler and its fleet server)
// and one node agent ("node-a") connected to it. It is started once for the
// package's tests (startFleet) and stopped by TestMain.
type fleet struct {
	cp       *controlplane.ControlPlane
	agentUDP string // the agent's counts address
	agentTCP string // its routing address
	stop     func()
}

var (
	fleetOnce sync.Once
	theFleet  *fleet
	fleetErr  error
	pods      atomic.Int32 // simulated pods: addresses 127.0.1.<n>
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theFleet != nil {
		theFleet.stop()
	}
	os.Exit(code)
}

// startFleet returns the package's fleet, starting it on first use.
func startFleet(t *testing.T) *fleet {
	t.Helper()
	fleetOnce.Do(func() { theFleet, fleetErr = newFleet() })
	if fleetErr != nil {
		t.Fatalf("fleet: %v", fleetErr)
	}
	return theFleet
}

// newFleet starts the control side with its one node agent.
func newFleet() (*fleet, error) {
	fs, err := fleetstack.Start(namespace, "t0ken", "node-a")
	if err != nil {
		return nil, err
	}
	return &fleet{cp: fs.CP, stop: fs.Stop, agentUDP: fs.Agents[0].Counts, agentTCP: fs.Agents[0].Routing}, nil
}

// pod is one simulated application pod: a HotKeyPolicy of its own for the
// upstream, and the Pod object the injector would have labelled for it,
// on node-a with its own loopback address.
type pod struct {
	f      *fleet
	policy string
	ip     string
}

// newPod creates the policy (name) for up, governing keys with prefix:
// the hot key's and the counter's thresholds low, splitting allowed (4
// shards at most, 2 s epochs), the read mitigations off (the hot key is
// detected, not mitigated).
func (f *fleet) newPod(t *testing.T, name string, up upstream, prefix string) *pod {
	t.Helper()
	ctx := context.Background()
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	p := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	p.Spec = v1alpha1.HotKeyPolicySpec{
		Mode:       v1alpha1.ModeEnforce,
		Target:     v1alpha1.RedisTarget{Addresses: up.addrs, Cluster: up.cluster},
		Keys:       v1alpha1.KeySelector{Include: []string{prefix + "*"}},
		Detection:  v1alpha1.Detection{Window: d(2 * time.Second), ReportInterval: d(500 * time.Millisecond)},
		Thresholds: v1alpha1.Thresholds{ReadsPerSecond: readThreshold, WritesPerSecond: writeThreshold, SustainFor: d(time.Second)},
		Capacity:   v1alpha1.Capacity{PerShardWritesPerSecond: writeThreshold},
		Mitigations: v1alpha1.Mitigations{
			Coalesce:   v1alpha1.Coalesce{Enabled: ptr.To(false)},
			LocalCache: v1alpha1.LocalCache{Enabled: ptr.To(false)},
			Split:      v1alpha1.Split{Enabled: ptr.To(true), MaxShards: 4, Epoch: d(2 * time.Second)},
		},
	}
	v1alpha1.SetDefaults(&p.Spec)
	if err := f.cp.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.cp.Client.Delete(context.Background(), p) })
	ip := fmt.Sprintf("127.0.1.%d", pods.Add(1))
	po := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "app-" + name, Labels: map[string]string{v1alpha1.LabelPolicy: name}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := f.cp.Client.Create(ctx, po); err != nil {
		t.Fatal(err)
	}
	po.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := f.cp.Client.Status().Update(ctx, po); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.cp.Client.Delete(context.Background(), po) })
	return &pod{f: f, policy: name, ip: ip}
}

// table is the policy's published routing table (nil before the first).
func (p *pod) table(t *testing.T) *routing.Table {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := p.f.cp.Client.Get(context.Background(), crclient.ObjectKey{Namespace: namespace, Name: routing.ConfigMapName(p.policy)}, cm); err != nil {
		return nil
	}
	tbl, err := routing.Parse([]byte(cm.Data[routing.ConfigMapKey]))
	if err != nil {
		t.Fatalf("published table: %v", err)
	}
	return tbl
}

// delete deletes the pod's policy; at cleanup, one whose deletion is
// still blocked is let go without its folds (heatsink.dev/skip-fold).
func (p *pod) delete(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cl := p.f.cp.Client
	pol := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: p.policy}}
	if err := cl.Delete(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"annotations":{"` + controllers.AnnotationSkipFold + `":"true"}}}`)
		if err := cl.Patch(ctx, pol, crclient.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("let the deletion of %s go: %v", p.policy, err)
		}
	})
}

// drainBlocked reports whether the policy is deleted and its drain blocked
// on its Redis: Ready says Draining, Degraded RedisUnavailable.
func (p *pod) drainBlocked(t *testing.T) bool {
	t.Helper()
	pol := &v1alpha1.HotKeyPolicy{}
	if err := p.f.cp.Client.Get(context.Background(), crclient.ObjectKey{Namespace: namespace, Name: p.policy}, pol); err != nil {
		return false
	}
	ready := meta.FindStatusCondition(pol.Status.Conditions, v1alpha1.ConditionReady)
	degraded := meta.FindStatusCondition(pol.Status.Conditions, v1alpha1.ConditionDegraded)
	return ready != nil && ready.Reason == controllers.ReasonDraining &&
		degraded != nil && degraded.Status == metav1.ConditionTrue && degraded.Reason == v1alpha1.ReasonRedisUnavailable
}

// reported is key's rate in the manager's HotKeyReport for the policy
// (reads, or writes if write), and whether it is at or above its threshold.
func (p *pod) reported(t *testing.T, key string, write bool) (int64, bool) {
	t.Helper()
	rep := &v1alpha1.HotKeyReport{}
	if err := p.f.cp.Client.Get(context.Background(), crclient.ObjectKey{Namespace: namespace, Name: p.policy}, rep); err != nil {
		return 0, false
	}
	for _, c := range rep.Spec.Candidates {
		if c.Key == key {
			if write {
				return c.WritesPerSecond, c.WritesPerSecond >= writeThreshold
			}
			return c.ReadsPerSecond, c.ReadsPerSecond >= readThreshold
		}
	}
	return 0, false
}

// tap stands between the sidecar and its node agent, on one port for UDP
// and TCP as the agent is: it records the per-key counts of every batch
// the sidecar sends (as the agent decodes them) and passes the batch on
// from the pod's address, by which the agent knows the pod; TCP (the
// routing stream) it relays untouched, from the pod's address too. The
// exact counts say whether each command of the client went through the
// sidecar, which the agent's sketch (rates) cannot.
type tap struct {
	addr string
	*reports
}

func (p *pod) startTap(t *testing.T) *tap {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	for i := 0; ; i++ { // a free TCP port whose UDP twin is free too
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if pc, err = net.ListenPacket("udp", ln.Addr().String()); err == nil {
			break
		}
		ln.Close()
		if i == 20 {
			t.Fatalf("no port free for both TCP and UDP: %v", err)
		}
	}
	src := net.ParseIP(p.ip)
	agentUDP, err := net.ResolveUDPAddr("udp", p.f.agentUDP)
	if err != nil {
		t.Fatal(err)
	}
	out, err := net.DialUDP("udp", &net.UDPAddr{IP: src}, agentUDP)
	if err != nil {
		t.Fatal(err)
	}
	r := &reports{keys: map[string][2]uint64{}}
	var wg, conns sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		var dec sidecarlink.Decoder
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = out.Write(buf[:n])
			r.record(&dec, buf[:n])
		}
	}()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				relay(c, dialer, p.f.agentTCP)
			}()
		}
	}()
	t.Cleanup(func() { pc.Close(); ln.Close(); out.Close(); wg.Wait(); conns.Wait() })
	return &tap{addr: ln.Addr().String(), reports: r}
}

// relay copies c to and from a new connection to addr until either ends.
func relay(c net.Conn, dialer *net.Dialer, addr string) {
	defer c.Close()
	up, err := dialer.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}
