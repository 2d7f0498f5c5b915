package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/dataplane/counts"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// counterValue reads a counter of the agent's registry by its result label.
func counterValue(t testing.TB, d *Agent, name, result string) float64 {
	t.Helper()
	mfs, err := d.opts.Gatherer.Gather()
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

// harness is a real hub and a real node agent connected to it, with
// one fake clock for both, and a sidecar's counts client on 127.0.0.1 (the
// pod the manager names for the test policy).
type harness struct {
	t   *testing.T
	hub *hub.Hub
	// hubReg holds the hub's metrics.
	hubReg *prometheus.Registry
	d      *Agent
	clk    *clocktesting.FakeClock
	c      *counts.Client
}

func start(t *testing.T) *harness {
	t.Helper()
	return startWith(t, nil)
}

// startWith is start with the policy's spec changed by mut (after defaults).
func startWith(t *testing.T, mut func(*v1alpha1.HotKeyPolicySpec)) *harness {
	t.Helper()
	return startOpts(t, mut, nil)
}

// startOpts is startWith with the agent's options changed by mutOpts.
func startOpts(t *testing.T, mut func(*v1alpha1.HotKeyPolicySpec), mutOpts func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, clk: clocktesting.NewFakeClock(time.Now().Truncate(time.Second))}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	h.hubReg = prometheus.NewRegistry()
	if h.hub, err = hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "t0ken", Clock: h.clk, WarmUp: -1, Registerer: h.hubReg}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.hub.Start(ctx) }()
	addr, err := h.hub.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := &v1alpha1.HotKeyPolicySpec{Keys: v1alpha1.KeySelector{Include: []string{"product:*"}, Exclude: []string{"product:secret*"}}}
	v1alpha1.SetDefaults(spec)
	if mut != nil {
		mut(spec)
	}
	h.hub.SetPolicy(policy, hub.ParamsFromSpec(spec))
	h.hub.UpsertPod("shop/app-0", node, agentlink.Pod{IP: "127.0.0.1", Policy: policy})
	opts := Options{NodeName: node, ListenAddr: "127.0.0.1:0", Manager: addr, Token: "t0ken", Clock: h.clk}
	if mutOpts != nil {
		mutOpts(&opts)
	}
	if h.d, err = New(opts); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = h.d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// The sidecar's client, flushed by hand so each flush is one step.
	if h.c, err = counts.NewClient(h.d.Addr().String(), counts.ClientOptions{FlushInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.c.Close() })
	eventually.True(t, 20*time.Second, "the agent follows the manager and knows the policy", func() bool {
		return h.d.Stats().Connected && h.d.Tracks(policy)
	})
	return h
}

// send flushes the sidecar's client and waits until the agent counted it.
func (h *harness) send() {
	h.t.Helper()
	before := h.d.Stats().Batches
	sent := h.c.Stats().Batches
	h.c.Flush()
	want := before + h.c.Stats().Batches - sent
	eventually.True(h.t, 20*time.Second, "batches ingested", func() bool { return h.d.Stats().Batches >= want })
}

// step advances the fake clock by one tick and waits until the agent's
// summary loop has taken it (a fake ticker drops what is not taken).
func (h *harness) step() {
	h.t.Helper()
	before := h.d.Stats().Ticks
	h.clk.Step(DefaultTick)
	h.d.Tick() // under Options.ExternalTicks; nothing otherwise
	eventually.True(h.t, 20*time.Second, "the agent's tick", func() bool { return h.d.Stats().Ticks > before })
}

// afterInterval steps until a summary due by its interval is built and
// waits until it is sent; it returns the summaries sent.
func (h *harness) afterInterval() uint64 {
	h.t.Helper()
	before := h.d.Stats().Summaries
	for at := h.d.Stats().Summarized; h.d.Stats().Summarized == at; {
		h.step()
	}
	eventually.True(h.t, 20*time.Second, "the interval's summary is sent", func() bool { return h.d.Stats().Summaries > before })
	return h.d.Stats().Summaries
}

// settle steps until the first summaries and the policy's directive have
// settled.
func (h *harness) settle() {
	h.t.Helper()
	for range 20 {
		h.step()
	}
}

// settledPins settles, and returns a maker of the policy's next
// directive, pinning pins.
func (h *harness) settledPins() func(pins ...string) *agentlink.Directive {
	h.settle()
	h.d.mu.RLock()
	p := h.d.policies[policy]
	h.d.mu.RUnlock()
	return func(pins ...string) *agentlink.Directive {
		p.mu.Lock()
		defer p.mu.Unlock()
		dir := p.dir
		dir.Pins, dir.Version = pins, dir.Version+1
		return &dir
	}
}

// reads is the hub's estimate of key's reads/s.
func (h *harness) reads(key string) int64 {
	snap, _ := h.hub.Snapshot(policy)
	return snap.Keys[key].ReadsPerSecond
}

// TestAgentReportsToTheManager drives a real agent from a sidecar's counts
// client and a real hub, with a fake clock for every time rule.
func TestAgentReportsToTheManager(t *testing.T) {
	h := start(t)

	t.Run("a key over its threshold reaches the manager at the next tick", func(t *testing.T) {
		// Summaries of quiet keys first, so the next one is not the first.
		for i := 0; i < 20; i++ {
			h.c.Observe(policy, fmt.Sprintf("product:%d", i), 10, 1, 100)
			h.send()
			h.step()
		}
		began := h.clk.Now()
		// 6000 reads/s on this node for the hot key (600 per 100 ms batch),
		// over the default 5000 threshold; excluded and non-included keys
		// just as hot.
		h.c.Observe(policy, "product:hot", 600, 0, 600*512)
		h.c.Observe(policy, "product:secret-hot", 600, 0, 0)
		h.c.Observe(policy, "session:hot", 600, 0, 0)
		h.send()
		h.step()
		eventually.True(t, 20*time.Second, "the hub sees product:hot over its threshold", func() bool {
			return h.reads("product:hot") >= v1alpha1.FallbackReadsPerSecond
		})
		t.Logf("over its threshold at the manager %v after the key turned hot (one tick: an urgent summary)", h.clk.Since(began))
		if h.reads("product:secret-hot") != 0 || h.reads("session:hot") != 0 {
			t.Error("keys outside the policy's globs reached the manager")
		}
	})

	t.Run("one summary per interval while nothing new turns hot", func(t *testing.T) {
		eventually.True(t, 20*time.Second, "the urgent summary delivered", func() bool { return h.d.Stats().Summaries > 0 })
		before := h.d.Stats().Summaries
		for i := 0; i < 30; i++ { // 3s, the hot key steady
			h.c.Observe(policy, "product:hot", 600, 0, 0)
			h.send()
			h.step()
		}
		eventually.True(t, 20*time.Second, "3 summaries", func() bool { return h.d.Stats().Summaries-before >= 3 })
		if n := h.d.Stats().Summaries - before; n > 4 {
			t.Errorf("%d summaries in 3s of steady traffic with a 1s interval, want 3 (4 at most)", n)
		}
	})

	t.Run("the manager pins the hot key and its count becomes exact", func(t *testing.T) {
		eventually.True(t, 20*time.Second, "product:hot exact at the manager", func() bool {
			h.c.Observe(policy, "product:hot", 600, 0, 0)
			h.send()
			h.step()
			snap, _ := h.hub.Snapshot(policy)
			return snap.Estimates["product:hot"].Exact
		})
	})

	t.Run("bad and foreign batches are dropped and counted", func(t *testing.T) {
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
			return counterValue(t, h.d, "heatsink_node_agent_batches_total", "bad_magic") == 1 &&
				counterValue(t, h.d, "heatsink_node_agent_batches_total", "unknown_version") == 1 &&
				counterValue(t, h.d, "heatsink_node_agent_batches_total", "truncated") == 1
		})
		// A policy this pod was not injected for.
		h.c.Observe("shop/unknown", "k", 1, 0, 0)
		h.c.Flush()
		eventually.True(t, 20*time.Second, "unentitled counted", func() bool {
			return counterValue(t, h.d, "heatsink_node_agent_batches_total", "unentitled") == 1
		})
		// A pod the manager did not name (another address of this host).
		stranger, err := counts.NewClient(h.d.Addr().String(), counts.ClientOptions{FlushInterval: time.Hour, LocalAddr: "127.0.0.2"})
		if err != nil {
			t.Fatal(err)
		}
		defer stranger.Close()
		stranger.Observe(policy, "product:evil", 1e6, 0, 0)
		stranger.Flush()
		eventually.True(t, 20*time.Second, "unknown source counted", func() bool {
			return counterValue(t, h.d, "heatsink_node_agent_batches_total", "unknown_source") == 1
		})
		h.c.Observe(policy, "product:hot", 1, 0, 0)
		h.send() // still serving
	})

	t.Run("a policy the manager removes is forgotten", func(t *testing.T) {
		h.hub.RemovePolicy(policy)
		eventually.True(t, 20*time.Second, "policy forgotten", func() bool { return !h.d.Tracks(policy) })
	})
}

// TestOnRoutingTableSeesEachStoredVersion: the observation hook is called
// once per table the agent stores from the real hub's pushes, in version
// order, never for a version it already holds or an older one, and the
// table it reports is the one its routing server serves.
func TestOnRoutingTableSeesEachStoredVersion(t *testing.T) {
	type seen struct {
		policy  string
		version int64
	}
	var mu sync.Mutex
	var got []seen
	h := startOpts(t, nil, func(o *Options) {
		o.OnRoutingTable = func(p string, v int64) {
			mu.Lock()
			got = append(got, seen{p, v})
			mu.Unlock()
		}
	})
	table := func(v int64) []byte { return []byte(fmt.Sprintf(`{"version":%d,"entries":[]}`, v)) }
	h.hub.SetRouting(policy, 1, table(1), nil)
	h.hub.SetRouting(policy, 3, table(3), nil)
	h.hub.SetRouting(policy, 2, table(2), nil) // older: the hub drops it
	h.hub.SetRouting(policy, 3, table(3), nil) // the same: dropped too
	h.hub.SetRouting(policy, 4, table(4), nil)
	eventually.True(t, 20*time.Second, "version 4 observed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0 && got[len(got)-1].version == 4
	})
	// A stale push straight to the agent's store is not reported either.
	if h.d.routes.update(policy, 2, table(2)) {
		t.Error("the agent stored version 2 over version 4")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []seen{{policy, 1}, {policy, 3}, {policy, 4}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(seen{})); diff != "" {
		t.Errorf("observed tables (-want +got):\n%s", diff)
	}
	if v, body, _ := h.d.routes.current(policy); v != 4 || string(body) != string(table(4)) {
		t.Errorf("the agent holds version %d (%s), want 4", v, body)
	}
	// The hub timed each of the three pushes to this agent's stream, on its
	// (fake, unmoved) clock.
	var count uint64
	var sum float64
	eventually.True(t, 20*time.Second, "3 pushes timed", func() bool {
		count, sum = histogram(t, h.hubReg, "heatsink_manager_fleet_routing_push_seconds")
		return count >= 3
	})
	if count != 3 || sum != 0 {
		t.Errorf("routing push histogram: %d samples summing to %gs, want 3 summing to 0s (the hub's clock did not move)", count, sum)
	}
}

// histogram is the sample count and sum of a histogram without labels.
func histogram(t *testing.T, g prometheus.Gatherer, name string) (uint64, float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			hg := mf.GetMetric()[0].GetHistogram()
			return hg.GetSampleCount(), hg.GetSampleSum()
		}
	}
	return 0, 0
}

// TestAgentWaitsForItsToken: the agent starts before the manager has made
// the token Secret (its volume is optional), keeps serving, and connects
// once the kubelet mounts the token.
func TestAgentWaitsForItsToken(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.Start(ctx) }()
	addr, err := h.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	d, err := New(Options{NodeName: node, ListenAddr: "127.0.0.1:0", Manager: addr, TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// No token yet: not connected (the agent retries, it does not exit).
	if d.Stats().Connected {
		t.Fatal("connected without a token")
	}
	if err := os.WriteFile(file, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the agent connects once the token is there", func() bool { return d.Stats().Connected })
}

// TestDetectionFieldsTakeEffect: spec.detection reaches the node agents
// through the manager's directive and changes what they do.
func TestDetectionFieldsTakeEffect(t *testing.T) {
	t.Run("reportInterval sets how often a node summarises", func(t *testing.T) {
		for _, tc := range []struct {
			interval time.Duration
			want     uint64 // summaries in 6 s without anything urgent
		}{{500 * time.Millisecond, 12}, {2 * time.Second, 3}} {
			h := startWith(t, func(s *v1alpha1.HotKeyPolicySpec) {
				s.Detection.ReportInterval = metav1.Duration{Duration: tc.interval}
			})
			eventually.True(t, 20*time.Second, "the first summary", func() bool { h.step(); return h.d.Stats().Summaries > 0 })
			before := h.d.Stats().Summaries
			for range 60 { // 6 s of ticks
				h.step()
			}
			eventually.True(t, 20*time.Second, "summaries delivered", func() bool { return h.d.Stats().Summaries-before >= tc.want-1 })
			if got := h.d.Stats().Summaries - before; got+1 < tc.want || got > tc.want+1 {
				t.Errorf("interval %v: %d summaries in 6s, want %d", tc.interval, got, tc.want)
			}
		}
	})
	t.Run("window sets how long a key's traffic counts", func(t *testing.T) {
		for _, tc := range []struct {
			window time.Duration
			gone   bool // after 4 s of silence
		}{{2 * time.Second, true}, {20 * time.Second, false}} {
			h := startWith(t, func(s *v1alpha1.HotKeyPolicySpec) { s.Detection.Window = metav1.Duration{Duration: tc.window} })
			for range 10 {
				h.c.Observe(policy, "product:burst", 500, 0, 0)
				h.send()
				h.step()
			}
			eventually.True(t, 20*time.Second, "the burst reaches the manager", func() bool { return h.reads("product:burst") > 0 })
			for range 40 { // 4 s of silence
				h.step()
			}
			h.step()
			eventually.True(t, 20*time.Second, "a summary after the silence", func() bool {
				h.step()
				gone := h.reads("product:burst") == 0
				return gone == tc.gone
			})
		}
	})
	t.Run("topK sets how many keys a node tracks, at least 256", func(t *testing.T) {
		for _, tc := range []struct {
			topK  int32
			store int
		}{{64, 256 * 3 / 2}, {600, 600 * 3 / 2}} {
			h := startWith(t, func(s *v1alpha1.HotKeyPolicySpec) { s.Detection.TopK = tc.topK })
			h.d.mu.RLock()
			got := h.d.policies[policy].sk.Capacity()
			h.d.mu.RUnlock()
			if got != tc.store {
				t.Errorf("topK %d: the node's store holds %d keys, want %d", tc.topK, got, tc.store)
			}
		}
	})
}

// TestIdleAgentSummarizesOnlyWhenDue: an agent builds a summary once per
// report interval, not at every tick (building one rates every key in every
// sketch: at 1,000 agents in the fleet simulator that was a quarter of their
// CPU at rest, and 40 % of it in a hot event, when counts came at every
// tick). Before the interval, counts make the next tick build one only if a
// key they touched reached its alert level; then it goes at once.
func TestIdleAgentSummarizesOnlyWhenDue(t *testing.T) {
	h := start(t)
	h.settle()
	before := h.d.Stats().Summarized
	for range 30 { // 3 s of ticks at a 1 s report interval
		h.step()
	}
	if n := h.d.Stats().Summarized - before; n < 2 || n > 4 {
		t.Fatalf("%d summaries built in 30 idle ticks of a 1 s interval, want about 3", n)
	}
	// Right after a summary due by its interval, two idle ticks build none.
	for at := h.d.Stats().Summarized; h.d.Stats().Summarized == at; {
		h.step()
	}
	at := h.d.Stats().Summarized
	h.step()
	h.step()
	if got := h.d.Stats().Summarized; got != at {
		t.Fatalf("idle ticks before the interval built %d summaries", got-at)
	}
	h.d.mu.RLock()
	p := h.d.policies[policy]
	h.d.mu.RUnlock()
	p.mu.Lock()
	alert := p.dir.Alert.Reads
	p.mu.Unlock()
	if alert <= 0 {
		t.Fatalf("the directive's alert level is %g reads/s", alert)
	}
	// Counts of a key well under the alert level build nothing.
	h.c.Observe(policy, "product:cool", 1, 0, 100)
	h.send()
	h.step()
	if got := h.d.Stats().Summarized; got != at {
		t.Fatalf("the tick after counts of a cool key built %d summaries, want 0", got-at)
	}
	sent := h.d.Stats().Summaries
	h.c.Observe(policy, "product:new", uint32(alert)+10, 0, 100) // over alert/s at once (a batch is rated over one flush period at least)
	h.send()
	h.step()
	if got := h.d.Stats().Summarized; got != at+1 {
		t.Fatalf("the tick after counts of a key at its alert level built %d summaries, want 1", got-at)
	}
	eventually.True(t, 20*time.Second, "the urgent summary reaches the manager", func() bool { return h.d.Stats().Summaries > sent })
}

// TestNewPinSendsASummaryAtOnce: a directive that pins a new key makes the
// first tick after a batch has counted it since the pin send a summary (the
// manager counts a pinned key exactly only once every node says it applied
// the pin, and a summary before any batch would say its exact rate is
// zero), where one that pins nothing new waits for the report interval like
// an idle tick.
func TestNewPinSendsASummaryAtOnce(t *testing.T) {
	h := start(t)
	directive := h.settledPins()
	sent := h.afterInterval()
	if err := h.d.applyDirective(directive()); err != nil { // no pin: nothing new to tell
		t.Fatal(err)
	}
	h.step()
	h.step()
	if got := h.d.Stats().Summaries; got != sent {
		t.Fatalf("a directive pinning nothing new sent %d summaries before the interval", got-sent)
	}
	sent = h.afterInterval()
	if err := h.d.applyDirective(directive("product:viral")); err != nil {
		t.Fatal(err)
	}
	// Until a batch counts the key since its pin, its exact rate would
	// read zero while its traffic waits in the sidecars (the manager would
	// unpin it): the summary waits, for a flush period at most.
	h.step()
	if got := h.d.Stats().Summaries; got != sent {
		t.Fatalf("a new pin sent %d summaries before any batch counted the key since the pin", got-sent)
	}
	h.c.Observe(policy, "product:viral", 5, 0, 100)
	h.send()
	h.step()
	eventually.True(t, 20*time.Second, "the summary saying the pin is applied reaches the manager, the key counted", func() bool {
		return h.d.Stats().Summaries > sent && h.reads("product:viral") > 0
	})
	// A key no sidecar sends is echoed a flush period after its pin, at
	// the latest: its count of zero is then true.
	sent = h.afterInterval()
	if err := h.d.applyDirective(directive("product:viral", "product:quiet")); err != nil {
		t.Fatal(err)
	}
	h.step()
	h.step()
	eventually.True(t, 20*time.Second, "the summary echoing the quiet key's pin reaches the manager", func() bool { return h.d.Stats().Summaries > sent })
	sent = h.d.Stats().Summaries
	h.step()
	h.step()
	if got := h.d.Stats().Summaries; got != sent {
		t.Fatalf("the same pin sent %d more summaries two ticks later", got-sent)
	}
	// And one more half an interval after the pin's summary
	// (summary.PinFollowUpAfter), before the interval, and no other.
	for range 3 {
		h.step()
	}
	eventually.True(t, 20*time.Second, "the summary half an interval after the pin's reaches the manager", func() bool { return h.d.Stats().Summaries > sent })
	sent = h.d.Stats().Summaries
	h.step()
	h.step()
	if got := h.d.Stats().Summaries; got != sent {
		t.Fatalf("the same pin sent %d more summaries after its follow-up, before the interval", got-sent)
	}
}

// TestSummaryEchoesAPinOnlyWithItsCounts: a summary built before a batch
// has counted a newly pinned key, such as one due by the interval just
// after the pin, says the node applied the directive before the pin; the
// one after the batch echoes the pin, with the key's count. The previous
// release's manager unpinned a key whose echoed count read zero, and
// pinned it again, over and over (test/skew TestSkewPreviousManager).
func TestSummaryEchoesAPinOnlyWithItsCounts(t *testing.T) {
	h := start(t)
	dir := h.settledPins()("product:viral")
	before := dir.Version - 1
	if err := h.d.applyDirective(dir); err != nil {
		t.Fatal(err)
	}
	echo := func() (uint64, float64) {
		s, _, _ := h.d.summarize(h.clk.Now())
		for _, k := range s.Policies[0].Keys {
			if k.Key == "product:viral" {
				return s.Policies[0].Directive, k.Reads
			}
		}
		return s.Policies[0].Directive, 0
	}
	if v, _ := echo(); v != before {
		t.Fatalf("before any batch since the pin: the summary echoes directive %d, want %d (the one before the pin)", v, before)
	}
	h.c.Observe(policy, "product:viral", 5, 0, 100)
	h.send()
	if v, reads := echo(); v != dir.Version || reads <= 0 {
		t.Fatalf("after a batch: the summary echoes directive %d with %v reads/s of the key, want %d with its count", v, reads, dir.Version)
	}
}

// TestFailingMoveSendsASummaryAtOnce: a key's commands failing on its
// move's path clearly more than the sidecar's direct ones (5 failures or
// more since the last summary, summary.MoveUrgent) make the agent send a
// summary as soon as the batch is counted, before the next tick and the
// report interval: the manager withdraws such a move
// on the summary that shows it, and one sent at the interval waited up to
// an interval for it. Failures no worse than the direct commands', or too
// few for the manager to judge, wait for the interval like an idle tick.
func TestFailingMoveSendsASummaryAtOnce(t *testing.T) {
	h := start(t)
	h.settle()
	sent := h.afterInterval()
	served := func(n, failed int) {
		for i := range n {
			h.c.ObserveMoved(policy, "product:split", false, i < failed)
		}
	}
	direct := func(n, failed int) {
		for i := range n {
			h.c.ObserveRaw(policy, false, i < failed)
		}
	}
	// As bad as the direct commands (a failover of the whole upstream):
	// 10 of 50 against 20 of 100.
	served(50, 10)
	direct(100, 20)
	h.send()
	h.step()
	h.step()
	if got := h.d.Stats().Summaries; got != sent {
		t.Fatalf("a move failing as much as the direct commands sent %d summaries before the interval", got-sent)
	}
	// Worse, but 4 failures: fewer than the manager judges.
	sent = h.afterInterval()
	served(20, 4)
	direct(100, 0)
	h.send()
	h.step()
	if got := h.d.Stats().Summaries; got != sent {
		t.Fatalf("4 failures on the move's path sent %d summaries before the interval", got-sent)
	}
	// The fifth: sent as soon as the batch is counted, not at the next
	// tick (the fake clock does not move).
	served(1, 1)
	h.send()
	eventually.True(t, 20*time.Second, "the summary with the move's failures reaches the manager at once", func() bool {
		return h.d.Stats().Summaries > sent
	})
	if h.d.Stats().Summaries != sent+1 {
		t.Fatalf("%d summaries sent, want 1", h.d.Stats().Summaries-sent)
	}
}

// TestRefusalSendsASummaryAtOnce: a command refused because of a key's
// move makes the agent send a summary as soon as the batch is counted, not
// at the next interval: the manager withdraws the move on the first summary
// that lists a refusal. Refusals of that key again within the report
// interval wait for it (the manager has heard).
func TestRefusalSendsASummaryAtOnce(t *testing.T) {
	h := start(t)
	h.settle()
	sent := h.afterInterval()
	h.step()
	h.c.ObserveRefused(policy, "product:queue")
	h.send()
	eventually.True(t, 20*time.Second, "the summary with the refusal reaches the manager at once", func() bool {
		return h.d.Stats().Summaries > sent
	})
	h.step()
	h.c.ObserveRefused(policy, "product:queue")
	h.send()
	h.step()
	h.step()
	if got := h.d.Stats().Summaries; got != sent+1 {
		t.Fatalf("%d summaries sent after the first refusal's, want 1", got-sent)
	}
}

// TestTrickledMoveFailuresSendAtOnce: failures that reach the manager's
// rule only with those of the summaries sent within the last report
// interval (the manager's shortest window holds both) make the agent send
// a summary at once too (summary.MoveUrgentWithRecent): 4 failures went
// with the interval's summary, and the fifth, a tick later, is sent as
// soon as its batch is counted, not at the next interval. Before, only
// failures since the last summary counted, so failures trickling in at
// fewer than 5 a summary (a slow client, a loaded machine) waited for the
// interval every time. The sixth makes nothing urgent: the manager has
// heard of 5 already.
func TestTrickledMoveFailuresSendAtOnce(t *testing.T) {
	h := start(t)
	h.settle()
	h.afterInterval()
	failing := func(n, failed int) {
		for i := range n {
			h.c.ObserveMoved(policy, "product:split", false, i < failed)
		}
		for range 100 {
			h.c.ObserveRaw(policy, false, false)
		}
		h.send()
	}
	failing(20, 4)
	sent := h.afterInterval() // with the 4 failures
	h.step()
	if got := h.d.Stats().Summaries; got != sent {
		t.Fatalf("a tick after the interval's summary: %d more sent", got-sent)
	}
	failing(1, 1)
	eventually.True(t, 20*time.Second, "the summary with the fifth failure reaches the manager at once", func() bool {
		return h.d.Stats().Summaries > sent
	})
	h.step()
	failing(1, 1)
	h.step()
	h.step()
	if got := h.d.Stats().Summaries; got != sent+1 {
		t.Fatalf("%d summaries sent after the fifth failure's, want 1", got-sent)
	}
}
