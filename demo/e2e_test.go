package demo

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEndToEnd runs the demo's scenario, shortened, on real parts: a
// kube-apiserver, a 3-master Redis Cluster, the manager, two node agents and
// four sidecar proxies. It checks the promises of the demo: both viral keys
// are mitigated within 3 s of their spike, the busiest master ends under
// 1.5 × the mean, the split counter equals the acknowledged increments, and
// the scheduled keys are published before their event starts.
func TestEndToEnd(t *testing.T) {
	cfg := Short()
	res := runScenario(t, cfg)
	checkRelieved(t, res)
	if lead, ok := res.EventLead(); !ok || lead <= 0 {
		t.Errorf("scheduled keys published %v before their start (all published: %v), want > 0", lead, ok)
	}
	if res.Chart == "" {
		t.Errorf("no chart written")
	}
	// The viral key stays read for many TTLs: its cached value is refreshed
	// ahead of expiry (the policy's default refreshAheadPercent).
	if res.Engine.Refreshes == 0 {
		t.Errorf("no cache refresh ahead of expiry in %v of a read-hot key (cache hits %.0f, misses %.0f)", cfg.Duration, res.Engine.CacheHits, res.Engine.CacheMisses)
	}
}

// checkRelieved checks the demo's promise of relief: both viral keys routed
// within 3 s of their spike, the busiest master under 1.5 × the mean
// afterwards, the split counter equal to the acknowledged increments.
func checkRelieved(t *testing.T, res *Result) {
	t.Helper()
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
}

// runScenario runs cfg as a test (skipped with -short or when a stage is
// missing), logs its output and fails on an error, a missing stage or a
// component that stopped.
func runScenario(t *testing.T, cfg Config) *Result {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver and redis-server; skipped with -short")
	}
	if m := missingStages(); len(m) > 0 {
		t.Skipf("this build lacks %v: the scenario cannot run", m)
	}
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
	return res
}

// lineWatcher calls on for each line written to it.
type lineWatcher struct {
	mu  sync.Mutex
	buf bytes.Buffer
	on  func(line string)
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // incomplete: keep it for the next write
			return len(p), nil
		}
		w.on(line)
	}
}

// TestInterruptStopsEverything cancels a run during traffic, as Ctrl-C
// does, and checks that it returns promptly with what it measured and that
// nothing it started still listens.
func TestInterruptStopsEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a kube-apiserver and redis-server; skipped with -short")
	}
	if m := missingStages(); len(m) > 0 {
		t.Skipf("this build lacks %v", m)
	}
	cfg := Short()
	cfg.OutDir = t.TempDir()
	cfg.BackgroundRate, cfg.ViralReadRate, cfg.ViralWriteRate, cfg.EventRate = 200, 200, 300, 50
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	interrupt, stop := context.WithCancel(ctx)
	defer stop()
	cfg.Out = &lineWatcher{on: func(line string) {
		if strings.HasPrefix(line, "t=  8s") { // after the counter's spike
			stop()
		}
	}}
	res, err := Run(interrupt, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after an interrupt returned %v, want context.Canceled", err)
	}
	if res == nil || len(res.Samples) == 0 {
		t.Fatalf("interrupted run returned no measurements: %+v", res)
	}
	if ctx.Err() != nil {
		t.Fatal("the run did not stop before the test's deadline")
	}
	// Traffic stops first; the counter is still read through a sidecar.
	if res.CounterErr != nil || res.CounterAcked == 0 || res.CounterValue != res.CounterAcked {
		t.Errorf("after the interrupt: counter %d (err %v), acknowledged %d", res.CounterValue, res.CounterErr, res.CounterAcked)
	}
	addrs := append(append([]string{strings.TrimPrefix(res.APIServer, "https://")}, res.Masters...), res.Proxies...)
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Run returned", a)
		}
	}
}
