package detector

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector/report"
	"github.com/heatsink-dev/heatsink/detector/wire"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

const (
	ns   = "shop"
	node = "node-a"
)

func testPolicy(name string, include, exclude []string) *v1alpha1.HotKeyPolicy {
	p := &v1alpha1.HotKeyPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.HotKeyPolicySpec{
			Target: v1alpha1.RedisTarget{Addresses: []string{"redis.shop.svc:6379"}},
			Keys:   v1alpha1.KeySelector{Include: include, Exclude: exclude},
		},
	}
	v1alpha1.SetDefaults(&p.Spec)
	return p
}

func counter(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "result", result) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

type harness struct {
	t   *testing.T
	cp  *controlplane.ControlPlane
	d   *Detector
	clk *clocktesting.FakeClock
	reg *prometheus.Registry
	c   *wire.Client
}

func start(t *testing.T, cp *controlplane.ControlPlane) *harness {
	h := &harness{t: t, cp: cp, clk: clocktesting.NewFakeClock(time.Now().Truncate(time.Second)), reg: prometheus.NewRegistry()}
	d, err := New(Options{Config: cp.Config, NodeName: node, ListenAddr: "127.0.0.1:0", Clock: h.clk, Registerer: h.reg})
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("detector: %v", err)
		}
	})
	// The sidecar's client, flushed by hand so each flush is one step.
	h.c, err = wire.NewClient(d.Addr().String(), wire.ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.c.Close() })
	eventually.True(t, 20*time.Second, "report loop ticker registered", h.clk.HasWaiters)
	return h
}

// send flushes the client and waits until the detector handled its batches.
func (h *harness) send() {
	before := h.d.Stats().Batches + uint64(counter(h.t, h.reg, "heatsink_detector_batches_total", "unknown_policy"))
	sent := h.c.Stats().Batches
	h.c.Flush()
	want := before + h.c.Stats().Batches - sent
	eventually.True(h.t, 20*time.Second, "batches ingested", func() bool {
		return h.d.Stats().Batches+uint64(counter(h.t, h.reg, "heatsink_detector_batches_total", "unknown_policy")) >= want
	})
}

// step advances the fake clock by one tick and waits for the report loop to
// finish its evaluation.
func (h *harness) step() {
	before := h.d.Stats().Evaluations
	h.clk.Step(100 * time.Millisecond)
	eventually.True(h.t, 20*time.Second, "report evaluation", func() bool { return h.d.Stats().Evaluations > before })
}

func (h *harness) report(policy string) *v1alpha1.HotKeyReport {
	var r v1alpha1.HotKeyReport
	err := h.cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: report.Name(policy, node)}, &r)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return &r
}

// TestDetectorWritesReports drives a real detector from a sidecar's wire
// client against a real API server, with a fake clock for every time rule.
func TestDetectorWritesReports(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// A report left behind for a policy that no longer exists.
	orphan := &v1alpha1.HotKeyReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-" + node,
			Labels: map[string]string{v1alpha1.LabelPolicy: "gone", v1alpha1.LabelNode: node}},
		Spec: v1alpha1.HotKeyReportSpec{NodeName: node, PolicyName: "gone", Window: metav1.Duration{Duration: time.Second}, GeneratedAt: metav1.Now()},
	}
	if err := cp.Client.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	pol := testPolicy("checkout", []string{"product:*"}, []string{"product:secret*"})
	if err := cp.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	h := start(t, cp)
	eventually.True(t, 20*time.Second, "policy tracked", func() bool { return h.d.Tracks("shop/checkout") })
	eventually.True(t, 20*time.Second, "orphan report deleted", func() bool {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(orphan), &v1alpha1.HotKeyReport{})
		return apierrors.IsNotFound(err)
	})

	t.Run("nothing is written while no key is near a threshold", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			h.c.Observe("shop/checkout", fmt.Sprintf("product:%d", i), 10, 1, 100)
			h.send()
			h.step()
		}
		if r := h.report("checkout"); r != nil {
			t.Fatalf("report written for cold keys: %+v", r.Spec.Candidates)
		}
	})

	t.Run("a key over its threshold is reported within 1.5s", func(t *testing.T) {
		start := h.clk.Now()
		var r *v1alpha1.HotKeyReport
		over := func() bool {
			return r != nil && len(r.Spec.Candidates) > 0 && r.Spec.Candidates[0].ReadsPerSecond >= v1alpha1.DefaultReadsPerSecond
		}
		for !over() {
			if h.clk.Since(start) > 1500*time.Millisecond {
				t.Fatalf("1.5s after the key turned hot, the report is %+v", r)
			}
			// 6000 reads/s on this node for the hot key, over the default
			// 5000 threshold; excluded and non-included keys just as hot.
			h.c.Observe("shop/checkout", "product:hot", 600, 0, 600*512)
			h.c.Observe("shop/checkout", "product:secret-hot", 600, 0, 0)
			h.c.Observe("shop/checkout", "session:hot", 600, 0, 0)
			h.send()
			h.step()
			r = h.report("checkout")
		}
		t.Logf("reported over its threshold %v after the key turned hot", h.clk.Since(start))
		if len(r.Spec.Candidates) != 1 || r.Spec.Candidates[0].Key != "product:hot" {
			t.Fatalf("candidates = %+v, want only product:hot", r.Spec.Candidates)
		}
		if r.Labels[v1alpha1.LabelPolicy] != "checkout" || r.Labels[v1alpha1.LabelNode] != node ||
			r.Spec.NodeName != node || r.Spec.PolicyName != "checkout" {
			t.Errorf("report identity: labels %v spec %s/%s", r.Labels, r.Spec.PolicyName, r.Spec.NodeName)
		}
		// metav1.Time serialises whole seconds.
		if !r.Spec.GeneratedAt.Time.Equal(h.clk.Now().Truncate(time.Second)) {
			t.Errorf("generatedAt %v, want the detector's clock %v", r.Spec.GeneratedAt.Time, h.clk.Now())
		}
	})

	t.Run("at most one write per report interval", func(t *testing.T) {
		before := counter(t, h.reg, "heatsink_detector_report_writes_total", "written")
		// Rates that change materially every tick for 3s.
		for i := 0; i < 30; i++ {
			h.c.Observe("shop/checkout", "product:hot", uint32(600+(i%2)*600), 0, 0)
			h.c.Observe("shop/checkout", fmt.Sprintf("product:new-%d", i), 2000, 0, 0)
			h.send()
			h.step()
		}
		writes := counter(t, h.reg, "heatsink_detector_report_writes_total", "written") - before
		if writes < 2 || writes > 3 {
			t.Errorf("%v writes in 3s of changing candidates with a 1s interval, want 2..3", writes)
		}
	})

	t.Run("bad batches are dropped and counted", func(t *testing.T) {
		conn, err := net.Dial("udp", h.d.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, b := range [][]byte{[]byte("GET / HTTP/1.1"), {'H', 'S', 9, 0}, {'H', 'S', 1, 0, 200}} {
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		eventually.True(t, 20*time.Second, "drops counted", func() bool {
			return counter(t, h.reg, "heatsink_detector_batches_total", "bad_magic") == 1 &&
				counter(t, h.reg, "heatsink_detector_batches_total", "unknown_version") == 1 &&
				counter(t, h.reg, "heatsink_detector_batches_total", "truncated") == 1
		})
		h.c.Observe("shop/unknown", "k", 1, 0, 0)
		h.send()
		if counter(t, h.reg, "heatsink_detector_batches_total", "unknown_policy") != 1 {
			t.Error("a batch for an unknown policy was not counted as such")
		}
		h.c.Observe("shop/checkout", "product:hot", 1, 0, 0)
		h.send() // still serving
	})

	t.Run("reports are deleted with their policy", func(t *testing.T) {
		if h.report("checkout") == nil {
			t.Fatal("no report to delete")
		}
		if err := cp.Client.Delete(ctx, pol); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 20*time.Second, "report deleted", func() bool { return h.report("checkout") == nil && !h.d.Tracks("shop/checkout") })
	})
}
