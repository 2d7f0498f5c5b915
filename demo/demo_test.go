package demo

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/heatsink-dev/heatsink/demo/observe"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/webhook"
)

// threeMasters is the slot layout `redis-cli --cluster create` gives three
// masters.
var threeMasters = [][]slotRange{{{0, 5460}}, {{5461, 10922}}, {{10923, 16383}}}

func TestChooseKeys(t *testing.T) {
	for seed := int64(0); seed < 6; seed++ {
		k, err := chooseKeys(threeMasters, seed)
		if err != nil {
			t.Fatal(err)
		}
		if got := masterOf(threeMasters, k.ViralRead); got != k.HotMaster {
			t.Errorf("seed %d: viral read key on master %d, want %d", seed, got, k.HotMaster)
		}
		if got := masterOf(threeMasters, k.Counter); got != k.HotMaster {
			t.Errorf("seed %d: counter on master %d, want %d", seed, got, k.HotMaster)
		}
		if len(k.Event) != 3 {
			t.Fatalf("seed %d: %d event keys, want 3", seed, len(k.Event))
		}
		for _, e := range k.Event {
			if masterOf(threeMasters, e) == k.HotMaster {
				t.Errorf("seed %d: event key %s on the hot master", seed, e)
			}
		}
		again, _ := chooseKeys(threeMasters, seed)
		if diff := cmp.Diff(k, again); diff != "" {
			t.Errorf("seed %d: choice not reproducible (-first +second):\n%s", seed, diff)
		}
	}
	if _, err := chooseKeys(nil, 1); err == nil {
		t.Error("chooseKeys with no masters: no error")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{Default(), Short()} {
		if err := c.Validate(); err != nil {
			t.Errorf("built-in scenario invalid: %v", err)
		}
	}
	bad := Default()
	bad.Duration = time.Second
	bad.EventLead = bad.EventDuration
	bad.Epoch = 10 * time.Millisecond
	bad.ViralReadRate = -1
	err := bad.Validate()
	if err == nil {
		t.Fatal("invalid scenario accepted")
	}
	for _, want := range []string{"duration", "lead time", "epoch", "viral read rate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// result builds a run in which master 0 carries a spike from t=3s until its
// relief at t=5s.
func result(start time.Time) *Result {
	r := &Result{Start: start, Masters: []string{"a", "b", "c"}, Keys: Keys{ViralRead: "v", Counter: "c", Event: []string{"e"}}}
	for i := 1; i <= 12; i++ {
		at := start.Add(time.Duration(i) * time.Second)
		ops := []float64{100, 100, 100}
		if i >= 4 && i <= 5 {
			ops[0] = 700
		}
		r.Samples = append(r.Samples, observe.Sample{At: at, T: at.Sub(start), OpsPerSec: ops})
	}
	return r
}

func TestFillMoments(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	r := result(start)
	cfg := Short()
	cfg.ViralReadAt, cfg.ViralWriteAt = 3*time.Second, 3*time.Second
	split := routing.Entry{Key: "c", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1_000_005, Shards: 4}}}}
	read := routing.Entry{Key: "v", Coalesce: true}
	snap := observe.Snapshot{
		Table: &routing.Table{EpochMillis: 1000},
		Keys: map[string]observe.KeyTimes{
			"v": {Detected: start.Add(4 * time.Second), Routed: start.Add(5 * time.Second), Entry: &read},
			"c": {Detected: start.Add(3500 * time.Millisecond), Routed: start.Add(4500 * time.Millisecond), SplitEffective: start.Add(5 * time.Second), Entry: &split},
			"e": {Routed: start.Add(2 * time.Second)},
		},
	}
	r.EventStart = start.Add(10 * time.Second)
	r.fillMoments(cfg, snap)
	if got, want := r.ViralRead.SpikeToRouted(), 2*time.Second; got != want {
		t.Errorf("viral read spike → routed = %v, want %v", got, want)
	}
	if got, want := r.Counter.SpikeToRelief(), 2*time.Second; got != want {
		t.Errorf("counter spike → relief = %v, want %v (the split's epoch)", got, want)
	}
	if got, want := r.Counter.DetectionToRouting(), time.Second; got != want {
		t.Errorf("detection → routing = %v, want %v", got, want)
	}
	if got, want := r.RatioBefore, 7.0/3; math.Abs(got-want) > 1e-9 {
		t.Errorf("ratio before = %v, want %v (700 over a mean of 300 in the two unrelieved seconds)", got, want)
	}
	if got := r.RatioAfter; got != 1 {
		t.Errorf("ratio after = %v, want 1", got)
	}
	if lead, ok := r.EventLead(); !ok || lead != 8*time.Second {
		t.Errorf("event lead = %v, %v; want 8s, true", lead, ok)
	}
	if (Moments{}).SpikeToRouted() >= 0 {
		t.Error("a key never routed has a spike → routed time")
	}

	// The read key alone (no counter driven): after relief is from 2 s
	// after the read key's; the counter, never relieved, does not hold it.
	alone := cfg
	alone.ViralWriteRate = 0
	delete(snap.Keys, "c")
	r = result(start)
	r.fillMoments(alone, snap)
	if r.RatioAfter == 0 || r.Counter.SpikeToRelief() >= 0 {
		t.Errorf("read key alone: ratio after %v (want measured), counter relief %v (want none)", r.RatioAfter, r.Counter.SpikeToRelief())
	}
	r = result(start)
	r.fillMoments(cfg, snap)
	if r.RatioAfter != 0 {
		t.Errorf("a driven counter never relieved: ratio after %v, want not measured", r.RatioAfter)
	}
}

func TestCalmFill(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	var c CalmResult
	c.fill(observe.Snapshot{Keys: map[string]observe.KeyTimes{
		"user:0":      {Detected: at, Routed: at.Add(time.Second), Source: routing.SourceDetected},
		"user:1":      {Detected: at},
		"sale:item-1": {Routed: at, Source: routing.SourceScheduled},
		"user:2":      {},
	}})
	if !cmp.Equal(c.Mitigated, []string{"user:0"}) || !cmp.Equal(c.OverThreshold, []string{"user:0", "user:1"}) {
		t.Errorf("mitigated %v, over a threshold %v; want [user:0], [user:0 user:1]", c.Mitigated, c.OverThreshold)
	}
	if got := listed([]string{"a", "b"}); got != ": a, b" {
		t.Errorf("listed = %q", got)
	}
}

func TestWriteChart(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	r := result(start)
	r.ViralRead = Moments{Key: "v", Spike: start.Add(3 * time.Second), Detected: start.Add(4 * time.Second), Routed: start.Add(5 * time.Second)}
	r.EventStart = start.Add(10 * time.Second)
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := writeChart(path, r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1100 || b.Dy() != 560 {
		t.Errorf("chart is %v, want 1100x560", b)
	}
	if err := writeChart(filepath.Join(t.TempDir(), "missing", "x.png"), r); err == nil {
		t.Error("writing into a missing directory: no error")
	}
}

func TestMitigations(t *testing.T) {
	e := routing.Entry{Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 1, RefreshAheadPercent: 10}, ReplicaReads: &routing.ReplicaReads{MaxLagMillis: 1000}, Replicate: &routing.Replicate{Replicas: 4, TTLMillis: 1},
		Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1, Shards: 4}, {FromEpoch: 2, Shards: 8}}}}
	if got, want := mitigations(e), "coalesce,cache,refresh-ahead,replica-reads,replicas=4,shards=4→8"; got != want {
		t.Errorf("mitigations = %q, want %q", got, want)
	}
}

func TestViewDraws(t *testing.T) {
	start := time.Now().Add(-10 * time.Second)
	var buf strings.Builder
	cfg := Short()
	cfg.Live = true
	v := &view{cfg: cfg, out: &buf, keys: Keys{ViralRead: "product:v", Counter: "likes:c", HotMaster: 1}, masters: []string{"a:1", "b:2", "c:3"}, start: start, eventStart: start.Add(time.Minute)}
	snap := observe.Snapshot{Table: &routing.Table{Version: 7, EpochMillis: 1000, Entries: []routing.Entry{{Key: "product:v", Source: routing.SourceDetected, Coalesce: true}}},
		Keys: map[string]observe.KeyTimes{"product:v": {Routed: start.Add(cfg.ViralReadAt + 1500*time.Millisecond)}}}
	v.draw([]observe.Sample{{OpsPerSec: []float64{100, 900, 100}}}, snap, Counts{Ops: map[string]int64{"background": 10}})
	out := buf.String()
	for _, want := range []string{"routing v7", "master 2", "holds the viral keys", "busiest ÷ mean: 2.45", "product:v", "coalesce", "1.5s"} {
		if !strings.Contains(out, want) {
			t.Errorf("live view lacks %q:\n%s", want, out)
		}
	}
}

func TestParseEngineMetrics(t *testing.T) {
	text := "# HELP heatsink_engine_cache_hits_total x\n# TYPE heatsink_engine_cache_hits_total counter\n" +
		"heatsink_engine_cache_hits_total 1500\nheatsink_engine_coalesced_total 20\nheatsink_engine_upstream_reads_total 7\n" +
		"heatsink_engine_cache_misses_total 3\nheatsink_engine_cache_refreshes_total 5\n" +
		"heatsink_engine_fanout_keys_total 99\ngo_goroutines 12\n"
	var c EngineCounts
	for i := 0; i < 2; i++ {
		if err := parseEngineMetrics(strings.NewReader(text), &c); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(EngineCounts{CacheHits: 3000, Coalesced: 40, UpstreamReads: 14, CacheMisses: 6, Refreshes: 10}, c); diff != "" {
		t.Errorf("summed over two sidecars (-want +got):\n%s", diff)
	}
	if err := parseEngineMetrics(strings.NewReader("heatsink_engine_cache_hits_total x\n"), &c); err == nil {
		t.Error("a garbled value was accepted")
	}
}

func TestSamplePolicyIsValid(t *testing.T) {
	auto := Default()
	auto.Auto = DefaultAuto()
	calm := Default()
	calm.SetCalm()
	replicas := Default()
	replicas.SetReplicaReads()
	for name, cfg := range map[string]Config{"default": Default(), "short": Short(), "auto": auto, "calm": calm, "replica-reads": replicas} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		k, err := chooseKeys(threeMasters, cfg.Seed)
		if err != nil {
			t.Fatal(err)
		}
		p := samplePolicy(cfg, TargetName, k, time.Unix(2_000_000_000, 0))
		if errs, _ := webhook.ValidateSpec(&p.Spec, field.NewPath("spec")); len(errs) > 0 {
			t.Errorf("%s: the demo's policy fails validation: %v", name, errs.ToAggregate())
		}
		if m := p.Spec.Mitigations; cfg.ReplicaReads != (m.ReplicaReads.IsEnabled() && !m.LocalCache.IsEnabled() && !m.Replicate.IsEnabled()) {
			t.Errorf("%s: replica reads %v, local cache %v, replicate %v; want replica reads alone exactly in the replica-reads scenario", name, m.ReplicaReads.IsEnabled(), m.LocalCache.IsEnabled(), m.Replicate.IsEnabled())
		}
		switch {
		case cfg.Calm || cfg.ReplicaReads:
			if len(p.Spec.Schedules) != 0 {
				t.Errorf("%s: schedules %+v, want none (no event)", name, p.Spec.Schedules)
			}
		case !cmp.Equal(p.Spec.Schedules[0].Keys, k.Event):
			t.Errorf("%s: scheduled keys %v, want the event's %v", name, p.Spec.Schedules[0].Keys, k.Event)
		}
		th := p.Spec.Thresholds
		if typed := th.ReadsPerSecond > 0 || th.WritesPerSecond > 0 || p.Spec.Capacity.PerShardWritesPerSecond > 0; typed == (cfg.Auto != nil) {
			t.Errorf("%s: auto %v but the policy types reads %d, writes %d, per-shard writes %d",
				name, cfg.Auto != nil, th.ReadsPerSecond, th.WritesPerSecond, p.Spec.Capacity.PerShardWritesPerSecond)
		}
		if (th.Auto != nil) != (cfg.Auto != nil) {
			t.Errorf("%s: thresholds.auto %+v, want it set exactly when the demo runs with -auto", name, th.Auto)
		}
	}
}
