package capacity

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// testOptions count every interval with load (the test's loops are short).
var testOptions = Options{MinUtilization: 0.001, FullConfidenceCPU: 5, Memory: time.Hour}

// load runs at most rounds pipelines of n commands made by cmd, for at
// most d.
func load(t *testing.T, cl redis.Cmdable, rounds, n int, d time.Duration, cmd func(p redis.Pipeliner, i int)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for r := 0; r < rounds && ctx.Err() == nil; r++ {
		_, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < n; i++ {
				cmd(p, i)
			}
			return nil
		})
		// A GET of a missing key answers nil: load, not an error.
		if err != nil && err != redis.Nil && ctx.Err() == nil {
			t.Fatalf("load: %v", err)
		}
	}
}

// loadUntilConfident runs load rounds (10 pipelines of n commands each)
// and samples after each, until every node that want selects is fully
// confident, or fails after d. The tests' confidence scale is small, but
// how much CPU a fixed count of commands costs depends on the machine: a
// fast one spent a quarter of the scale on 40,000 pipelined GETs.
func loadUntilConfident(t *testing.T, cl redis.UniversalClient, s *Sampler, d time.Duration, want func(Node) bool, n int, cmd func(p redis.Pipeliner, i int)) []Node {
	t.Helper()
	end := time.Now().Add(d)
	for {
		load(t, cl, 10, n, time.Until(end), cmd)
		nodes, err := s.Sample(context.Background(), Target{Client: cl}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		done, seen := true, 0
		for _, nd := range nodes {
			if want(nd) {
				seen++
				done = done && nd.Confidence >= 1
			}
		}
		if done && seen > 0 {
			return nodes
		}
		if time.Now().After(end) {
			t.Fatalf("not confident after %v of load: %+v", d, nodes)
		}
	}
}

// TestSamplerStandaloneLearns: a loaded standalone server's learned capacity
// is finite and positive, and the confidence grows with the load seen.
func TestSamplerStandaloneLearns(t *testing.T) {
	if err := redisproc.Available(); err != nil {
		t.Skip(err)
	}
	srv := redistest.Standalone(t)
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer cl.Close()
	ctx := context.Background()
	s := NewSampler(time.Nanosecond, testOptions)
	if _, err := s.Sample(ctx, Target{Client: cl}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var conf []float64
	for i := 0; i < 4; i++ {
		load(t, cl, 20, 500, 5*time.Second, func(p redis.Pipeliner, i int) { p.Incr(ctx, fmt.Sprintf("k%d", i%50)) })
		nodes, err := s.Sample(ctx, Target{Client: cl}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != 1 || nodes[0].Addr != srv.Addr {
			t.Fatalf("nodes %+v", nodes)
		}
		e := nodes[0].Estimate
		if e.Capacity <= 0 || math.IsInf(e.Capacity, 0) || math.IsNaN(e.Capacity) {
			t.Fatalf("round %d: capacity %v", i, e.Capacity)
		}
		t.Logf("round %d: %.0f ops/s, utilization %.3f, capacity %.0f ops/s, confidence %.3f, %.2f µs/call", i, e.OpsPerSecond, e.Utilization, e.Capacity, e.Confidence, e.UsecPerCall)
		conf = append(conf, e.Confidence)
	}
	for i := 1; i < len(conf); i++ {
		if conf[i] <= conf[i-1] {
			t.Fatalf("confidence did not grow with load: %v", conf)
		}
	}
}

// TestSamplerClusterExpensiveShardLearnsLess: of a 3-master cluster, the
// master serving SUNIONSTOREs of big sets learns a lower capacity than the one
// serving GETs of a small value, for the same number of commands.
func TestSamplerClusterExpensiveShardLearnsLess(t *testing.T) {
	if err := redisproc.Available(); err != nil {
		t.Skip(err)
	}
	cl, dear, cheap := dearAndCheap(t)
	ctx := context.Background()
	s := NewSampler(time.Nanosecond, testOptions)
	if _, err := s.Sample(ctx, Target{Client: cl}, time.Now()); err != nil {
		t.Fatal(err)
	}
	const rounds, n = 10, 100
	load(t, cl, rounds, n, 10*time.Second, func(p redis.Pipeliner, _ int) { p.SUnionStore(ctx, dear+"u", dear+"a", dear+"b") })
	load(t, cl, rounds, n, 10*time.Second, func(p redis.Pipeliner, _ int) { p.Get(ctx, cheap+"v") })
	nodes, err := s.Sample(ctx, Target{Client: cl}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want the 3 masters", len(nodes))
	}
	got := map[string]Estimate{}
	for _, n := range nodes {
		got[n.Addr] = n.Estimate
		t.Logf("%s: capacity %.0f ops/s, confidence %.4f, %.2f µs/call", n.Addr, n.Capacity, n.Confidence, n.UsecPerCall)
	}
	d, ch := got[masterOf(t, cl, dear)], got[masterOf(t, cl, cheap)]
	if d.Capacity <= 0 || ch.Capacity <= 0 {
		t.Fatalf("capacities dear %v cheap %v, want both learned", d.Capacity, ch.Capacity)
	}
	if d.Capacity*2 > ch.Capacity {
		t.Fatalf("dear shard learned %.0f ops/s, cheap %.0f: want the dear one below half", d.Capacity, ch.Capacity)
	}
}

// dearAndCheap starts a real 3-master cluster and returns a client and two
// hash tags on different masters: dear+"a" and dear+"b" are 1,000-member
// sets (a SUNIONSTORE of them costs Redis about a millisecond), cheap+"v" a
// one-byte string (a GET costs a microsecond or two).
func dearAndCheap(t *testing.T) (cl *redis.ClusterClient, dear, cheap string) {
	t.Helper()
	c := redistest.Cluster(t)
	cl = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cl.Close() })
	ctx := context.Background()
	dear = "{d0}"
	for i := 0; cheap == ""; i++ {
		if tag := fmt.Sprintf("{c%d}", i); masterOf(t, cl, tag) != masterOf(t, cl, dear) {
			cheap = tag
		}
	}
	members := make([]interface{}, 1000)
	for i := range members {
		members[i] = i
	}
	for _, k := range []string{dear + "a", dear + "b"} {
		if err := cl.SAdd(ctx, k, members...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Set(ctx, cheap+"v", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return cl, dear, cheap
}

// masterOf is the address of the master serving key.
func masterOf(t *testing.T, cl *redis.ClusterClient, key string) string {
	t.Helper()
	n, err := cl.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return n.Options().Addr
}
