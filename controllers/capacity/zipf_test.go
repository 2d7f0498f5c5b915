package capacity

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

const (
	zipfKeys = 100_000
	zipfS    = 1.1
	// zipfObserved is how many of the hottest keys the decision sees each
	// second: far more than the hub lists (topK 64 per node), which can
	// only add false positives.
	zipfObserved = 2000
	// zipfBusiest is the simulated utilisation of the busiest master.
	zipfBusiest = 0.4
)

// TestAutoZipfLowUtilisationMitigatesNothing (issue 26, item 4, first
// bullet). Real: a 3-master 7.0.15 cluster under a Zipf(1.1) load over
// 100,000 keys (90 % GET, 10 % INCR, in pipelines of 250 commands until
// every master's capacity is fully confident, at most 30 s), its
// capacities learned from INFO, its slot map.
// Simulated: ten minutes of the manager's decisions on an injected clock,
// one per second, each fed the Poisson counts of the same Zipf for the
// 2,000 hottest keys at the total rate that puts the busiest master at
// 40 % of its learned capacity (per-master utilisation = Σ its keys' rates
// ÷ its capacity, over all 100,000 keys). With thresholds.auto nothing is
// mitigated; the fallback numbers (5000/1000, auto unset) mitigate the head
// of the same distribution, which is logged for comparison.
func TestAutoZipfLowUtilisationMitigatesNothing(t *testing.T) {
	if err := redisproc.Available(); err != nil {
		t.Skip(err)
	}
	c := redistest.Cluster(t)
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cl.Close()
	ctx := context.Background()
	s := NewSampler(time.Nanosecond, Options{MinUtilization: 0.001, FullConfidenceCPU: 0.05, Memory: time.Hour})
	if _, err := s.Sample(ctx, Target{Client: cl}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(26))
	z := rand.NewZipf(rng, zipfS, 1, zipfKeys-1)
	key := func(i int) string { return fmt.Sprintf("zipf:%d", i) }
	nodes := loadUntilConfident(t, cl, s, 30*time.Second, func(Node) bool { return true }, 250, func(p redis.Pipeliner, _ int) {
		k := key(int(z.Uint64()))
		if rng.Intn(10) == 0 {
			p.Incr(ctx, k)
		} else {
			p.Get(ctx, k)
		}
	})
	owners := s.Owners()
	var shards []decide.Shard
	index := map[string]int{}
	for _, n := range nodes {
		index[n.Addr] = len(shards)
		shards = append(shards, decide.Shard{Addr: n.Addr, LearnedShard: v1alpha1.LearnedShard{Capacity: n.Capacity, Confidence: n.Confidence}})
		t.Logf("%s: learned %.0f ops/s, confidence %.2f, measured utilisation %.3f", n.Addr, n.Capacity, n.Confidence, n.Utilization)
	}
	shardOf := func(k string) int {
		if i, ok := index[owners[routing.Slot(k)]]; ok {
			return i
		}
		return -1
	}
	// The Zipf's probabilities, and each master's share of the total.
	p := make([]float64, zipfKeys)
	var h float64
	for i := range p {
		p[i] = math.Pow(float64(i+1), -zipfS)
		h += p[i]
	}
	share := make([]float64, len(shards))
	for i := range p {
		p[i] /= h
		if j := shardOf(key(i)); j >= 0 {
			share[j] += p[i]
		}
	}
	total := math.Inf(1)
	for j, sh := range shards {
		if !sh.Confident() {
			t.Fatalf("%s not confident after the load: %+v", sh.Addr, sh.LearnedShard)
		}
		total = math.Min(total, zipfBusiest*sh.Capacity/share[j])
	}
	for j := range shards {
		shards[j].Utilization = total * share[j] / shards[j].Capacity
	}
	auto := &v1alpha1.HotKeyPolicySpec{Thresholds: v1alpha1.Thresholds{Auto: &v1alpha1.AutoThresholds{}}}
	v1alpha1.SetDefaults(auto)
	for j, f := range decide.ShardThresholds(decide.Input{Spec: auto, Shards: shards, ShardOf: shardOf}) {
		t.Logf("%s: simulated utilisation %.2f, thresholds %d/%d (%s)", shards[j].Addr, shards[j].Utilization, f.ReadsPerSecond, f.WritesPerSecond, f.Reads)
	}
	t.Logf("simulated total %.0f ops/s; hottest key %.0f ops/s", total, total*p[0])
	fallback := &v1alpha1.HotKeyPolicySpec{}
	v1alpha1.SetDefaults(fallback)
	for _, tc := range []struct {
		name string
		spec *v1alpha1.HotKeyPolicySpec
	}{{"auto", auto}, {"fallback", fallback}} {
		mitigated := simulateZipf(tc.spec, shards, shardOf, p, total, 10*time.Minute)
		t.Logf("%s: %d keys mitigated in 10 simulated minutes", tc.name, len(mitigated))
		if tc.name == "auto" && len(mitigated) != 0 {
			t.Fatalf("auto mitigated %d keys at low utilisation: %v", len(mitigated), mitigated)
		}
		if tc.name == "fallback" && len(mitigated) == 0 {
			t.Fatalf("the fallback mitigated nothing: the load is too light to tell the two apart")
		}
	}
}

// simulateZipf runs one decision a second for d on an injected clock, each
// fed Poisson counts of the zipfObserved hottest keys at total ops/s (a
// tenth writes), and returns the keys ever hot.
func simulateZipf(spec *v1alpha1.HotKeyPolicySpec, shards []decide.Shard, shardOf func(string) int, p []float64, total float64, d time.Duration) []string {
	rng := rand.New(rand.NewSource(11))
	ever := map[string]bool{}
	in := decide.Input{Now: time.Unix(1e9, 0), Spec: spec, Shards: shards, ShardOf: shardOf}
	for at := time.Duration(0); at < d; at += time.Second {
		in.Now = in.Now.Add(time.Second)
		in.Observations = make(map[string]decide.Observation, zipfObserved)
		for i := 0; i < zipfObserved; i++ {
			n := poisson(rng, total*p[i])
			w := poisson(rng, float64(n)/10)
			in.Observations[fmt.Sprintf("zipf:%d", i)] = decide.Observation{ReadsPerSecond: max(n-w, 0), WritesPerSecond: w}
		}
		out := decide.Decide(in)
		in.State = out.State
		for _, k := range out.Keys {
			ever[k.Key] = true
		}
	}
	var keys []string
	for k := range ever {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// poisson draws a Poisson count of mean m (normal approximation above 50).
func poisson(rng *rand.Rand, m float64) int64 {
	if m > 50 {
		return max(int64(math.Round(m+math.Sqrt(m)*rng.NormFloat64())), 0)
	}
	l, k, q := math.Exp(-m), int64(0), 1.0
	for {
		q *= rng.Float64()
		if q < l {
			return k
		}
		k++
	}
}
