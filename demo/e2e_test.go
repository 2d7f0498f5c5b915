package demo

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

// TestEndToEnd runs the demo's scenario, shortened, on real parts: a
// kube-apiserver, a 3-master Redis Cluster, the manager, two detectors and
// four sidecar proxies. It checks the promises of the demo: both viral keys
// are mitigated within 3 s of their spike, the busiest master ends under
// 1.5 × the mean, the split counter equals the acknowledged increments, and
// the scheduled keys are published before their event starts.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a kube-apiserver and redis-server; skipped with -short")
	}
	if m := missingStages(); len(m) > 0 {
		t.Skipf("this build lacks %v: the end-to-end scenario cannot run", m)
	}
	cfg := Short()
	cfg.OutDir = t.TempDir()
	if dir := os.Getenv("HEATSINK_DEMO_OUT"); dir != "" {
		cfg.OutDir = dir // keep the chart and the log to look at
	}
	var out bytes.Buffer
	cfg.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if len(res.Unavailable) > 0 {
		t.Fatalf("stages not available: %v", res.Unavailable)
	}
	for _, f := range res.Failures {
		t.Errorf("component failure: %v", f)
	}

	for _, m := range []Moments{res.ViralRead, res.Counter} {
		d := m.SpikeToRouted()
		if d < 0 || d > 3*time.Second {
			t.Errorf("%s: spike → routed = %v, want within 3s (detected %v after the spike)", m.Key, d, m.Detected.Sub(m.Spike))
		}
	}
	if res.RatioAfter == 0 || res.RatioAfter >= 1.5 {
		t.Errorf("busiest master ÷ mean after relief = %.2f, want < 1.5 (before %.2f)", res.RatioAfter, res.RatioBefore)
	}
	if res.CounterErr != nil {
		t.Errorf("reading the counter: %v", res.CounterErr)
	}
	if res.CounterAcked == 0 || res.CounterValue != res.CounterAcked {
		t.Errorf("counter = %d, acknowledged increments = %d, want equal and > 0", res.CounterValue, res.CounterAcked)
	}
	if lead, ok := res.EventLead(); !ok || lead <= 0 {
		t.Errorf("scheduled keys published %v before their start (all published: %v), want > 0", lead, ok)
	}
	if res.Chart == "" {
		t.Errorf("no chart written")
	}
}
