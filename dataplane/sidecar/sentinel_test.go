package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// switchRecorder keeps the times of the sidecar's master switches.
type switchRecorder struct {
	mu      sync.Mutex
	at      []time.Time
	new     []string
	fenceAt time.Time
}

func (r *switchRecorder) fence() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fenceAt.IsZero() {
		r.fenceAt = time.Now()
	}
}

func (r *switchRecorder) record(_, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, time.Now())
	r.new = append(r.new, addr)
}

func (r *switchRecorder) last() (time.Time, string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.at) == 0 {
		return time.Time{}, "", 0
	}
	return r.at[len(r.at)-1], r.new[len(r.new)-1], len(r.at)
}

// runSentinelSidecar runs the sidecar in front of h's master, found and
// followed through h's Sentinels, under splitTable (the counter "likes"
// split over 4 shards), and returns its client address.
func runSentinelSidecar(t *testing.T, h *redisproc.Sentinel, rec *switchRecorder) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "routing.json")
	if err := os.WriteFile(file, fmt.Appendf(nil, splitTable, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{
			Listener: ln, Sentinels: h.SentinelAddrs(), SentinelMaster: h.Opts.MasterName,
			SentinelPassword: h.Opts.SentinelPassword, Password: h.Opts.Password,
			OnMasterSwitch: rec.record, OnMasterFence: rec.fence,
			Policy: "p", Namespace: "ns", RoutingFile: file,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ln.Addr().String()
}

// switchWatch subscribes to +switch-master on every Sentinel and keeps the
// time of the first message.
func switchWatch(t *testing.T, h *redisproc.Sentinel) func() time.Time {
	t.Helper()
	var mu sync.Mutex
	var first time.Time
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var subs []*redis.PubSub
	for _, a := range h.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, Password: h.Opts.SentinelPassword})
		ps := sc.Subscribe(ctx, "+switch-master")
		subs = append(subs, ps)
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatalf("subscribe to %s: %v", a, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sc.Close()
			defer ps.Close()
			for {
				m, err := ps.ReceiveMessage(ctx)
				if err != nil {
					return
				}
				t.Logf("%s from %s at %s", m.Payload, a, time.Now().Format("15:04:05.000"))
				mu.Lock()
				if first.IsZero() {
					first = time.Now()
				}
				mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		// A blocked receive ends when its connection closes, not with ctx.
		cancel()
		for _, ps := range subs {
			ps.Close()
		}
		wg.Wait()
	})
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// failoverLoad is what the clients of TestSidecarFollowsSentinelFailover
// saw.
type failoverLoad struct {
	mu sync.Mutex
	// counter is the plain counter "counter", split the split counter
	// "likes" (the engine's INCRBY on one of its shards).
	counter, split incrCount
	ops            int64
	errs           []time.Time
	errKinds       map[string]int
	wrong          []string
}

// incrCount counts one counter's INCRs by outcome.
type incrCount struct {
	acked int64
	// refused got an error that says it was never sent (neverSent);
	// failed any other error, and each of those may or may not have
	// been applied.
	refused, failed int64
}

// incr sends one INCR of key and counts its outcome in n.
func (l *failoverLoad) incr(c *redis.Client, key string, n *incrCount) {
	err := c.Incr(context.Background(), key).Err()
	if err != nil {
		l.fail(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		n.acked++
	case neverSent(err):
		n.refused++
	default:
		n.failed++
	}
}

// neverSent reports an error that says its command never reached Redis:
// the proxy's dial refused by the fence ("upstream A unreachable: master
// failing over"), or the engine's (its client's dial refused: "redis
// master failing over", with no retry after a send). A command in flight
// on a connection the fence closed gets "upstream A: master failing over"
// and may have been applied, as may one whose connection failed.
func neverSent(err error) bool {
	msg := err.Error()
	if !strings.Contains(msg, "master failing over") {
		return false
	}
	return strings.Contains(msg, " unreachable: ") || !strings.Contains(msg, "heatsink proxy")
}

// check compares a counter's final value with what its INCRs were told:
// every acknowledged INCR counted, none refused by the fence, and at most
// those that failed in flight (each may or may not have been applied).
func (n incrCount) check(t *testing.T, what string, final int64) {
	t.Helper()
	t.Logf("%s: INCR acknowledged %d, never sent (refused by the fence) %d, failed in flight %d; value on the new master %d",
		what, n.acked, n.refused, n.failed, final)
	if final < n.acked || final > n.acked+n.failed {
		t.Errorf("%s = %d: want between the %d acknowledged INCRs and %d (acknowledged + failed in flight, which may have been applied)",
			what, final, n.acked, n.acked+n.failed)
	}
}

func (l *failoverLoad) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, time.Now())
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60]
	}
	l.errKinds[msg]++
}

// worker INCRs the shared counter and the split counter, and SETs then
// GETs a key of its own, until stop or its bounds: a GET must return the
// last acknowledged SET, or a later SET that failed (it may have been
// applied).
func (l *failoverLoad) worker(ctx context.Context, c *redis.Client, id int, maxOps int) {
	key := "key:" + strconv.Itoa(id)
	last := ""             // value of the last acknowledged SET
	var uncertain []string // SETs after it that failed
	for i := 0; i < maxOps && ctx.Err() == nil; i++ {
		l.incr(c, "counter", &l.counter)
		l.incr(c, "likes", &l.split)
		v := strconv.Itoa(i)
		if err := c.Set(context.Background(), key, v, 0).Err(); err != nil {
			l.fail(err)
			uncertain = append(uncertain, v)
		} else {
			last, uncertain = v, uncertain[:0]
		}
		got, err := c.Get(context.Background(), key).Result()
		if errors.Is(err, redis.Nil) {
			got, err = "", nil
		}
		switch {
		case err != nil:
			l.fail(err)
		case got == last:
		case slices.Contains(uncertain, got):
			// A failed SET was applied after all: it is the value now.
			last, uncertain = got, uncertain[:0]
		default:
			l.mu.Lock()
			l.wrong = append(l.wrong, fmt.Sprintf("client %d: GET %s = %q after SET %q was acknowledged", id, key, got, last))
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.ops += 4
		l.mu.Unlock()
	}
}

// TestSidecarFollowsSentinelFailover runs the sidecar against real Redis
// Sentinel (three Sentinels, a master and two replicas), drives it with
// go-redis clients doing INCR (of a plain counter and of a counter the
// routing table splits over shards) and SET/GET under load, and fails the
// master over with SENTINEL FAILOVER: the sidecar moves to the new master,
// no client gets a wrong reply, errors come only around the switch, and
// both counters read afterwards count every acknowledged INCR and at most
// the INCRs that failed in flight besides (one that got an error may or
// may not have been applied; a SENTINEL FAILOVER waits for the replica to
// catch up, so no acknowledged write is lost).
func TestSidecarFollowsSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and redis-sentinel; skipped with -short")
	}
	h := redistest.Sentinel(t, redisproc.SentinelOptions{DownAfter: time.Second, FailoverTimeout: 3 * time.Second})
	oldMaster, err := h.Master()
	if err != nil {
		t.Fatal(err)
	}
	firstSwitch := switchWatch(t, h)
	rec := &switchRecorder{}
	addr := runSentinelSidecar(t, h, rec)

	const workers, maxOps = 8, 1_000_000
	load := &failoverLoad{errKinds: map[string]int{}}
	clients := make([]*redis.Client, workers)
	for i := range clients {
		// No retries: a retried INCR may be applied twice.
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
		defer clients[i].Close()
	}
	eventually.Succeeds(t, 10*time.Second, func() error { return clients[0].Ping(context.Background()).Err() })
	// The table splits "likes": an INCR through the sidecar lands on a
	// shard, never on the base key.
	master := redis.NewClient(&redis.Options{Addr: oldMaster, Password: h.Opts.Password})
	defer master.Close()
	if err := clients[0].Incr(context.Background(), "likes").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := master.Exists(context.Background(), "likes").Result(); err != nil || n != 0 || splitSum(t, master) != 1 {
		t.Fatalf("INCR likes through the sidecar: base key exists %d (%v), shards sum %d; want the increment on a shard", n, err, splitSum(t, master))
	}
	load.split.acked++

	// The load runs until a second after the switch, 30 s at most.
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); load.worker(ctx, c, i, maxOps) }()
	}
	eventually.True(t, 10*time.Second, "the load is running", func() bool {
		load.mu.Lock()
		defer load.mu.Unlock()
		return load.ops > 3000
	})
	start := time.Now()
	if out, err := h.SentinelCommand(h.Sentinels[0].Addr, "SENTINEL", "FAILOVER", h.Opts.MasterName); err != nil || out != "OK" {
		t.Fatalf("SENTINEL FAILOVER: %q %v", out, err)
	}
	eventually.True(t, 20*time.Second, "the sidecar switches master", func() bool {
		_, to, _ := rec.last()
		return to != "" && to != oldMaster
	})
	switchedAt, proxyMaster, _ := rec.last()
	// One more second of load on the new master, then stop.
	eventually.True(t, 10*time.Second, "a second of load after the switch", func() bool { return time.Since(switchedAt) > time.Second })
	stop()
	wg.Wait()

	newMaster, err := h.WaitMaster(context.Background(), oldMaster)
	if err != nil {
		t.Fatal(err)
	}
	if proxyMaster != newMaster {
		t.Fatalf("the sidecar follows %s; the Sentinels name %s", proxyMaster, newMaster)
	}
	if _, _, n := rec.last(); n != 1 {
		t.Errorf("the sidecar switched %d times, want once", n)
	}
	notified := firstSwitch()
	if notified.IsZero() {
		t.Fatal("no +switch-master message seen")
	}
	rec.mu.Lock()
	fencedAt := rec.fenceAt
	rec.mu.Unlock()
	if fencedAt.IsZero() {
		t.Error("the sidecar did not fence the old master before the switch")
		fencedAt = switchedAt
	}
	t.Logf("failover %s -> %s: fence %v after SENTINEL FAILOVER, first +switch-master at %v; the sidecar switched %v after the first +switch-master (fenced for %v)",
		oldMaster, newMaster, fencedAt.Sub(start).Round(time.Millisecond), notified.Sub(start).Round(time.Millisecond),
		switchedAt.Sub(notified).Round(time.Microsecond), switchedAt.Sub(fencedAt).Round(time.Millisecond))

	for _, w := range load.wrong {
		t.Error("wrong reply: " + w)
	}
	direct := redis.NewClient(&redis.Options{Addr: newMaster, Password: h.Opts.Password})
	defer direct.Close()
	final, err := direct.Get(context.Background(), "counter").Int64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commands", load.ops)
	// No acknowledged INCR lost; none refused by the fence applied; those
	// in flight when the connections closed may have been.
	load.counter.check(t, "counter", final)
	// The split counter read through the sidecar (the engine sums its
	// shards on the new master) and summed on the new master directly.
	reader := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer reader.Close()
	likes, err := reader.Get(context.Background(), "likes").Int64()
	if err != nil {
		t.Fatalf("GET likes through the sidecar: %v", err)
	}
	load.split.check(t, "split counter likes (GET through the sidecar)", likes)
	if sum := splitSum(t, direct); sum != likes {
		t.Errorf("split counter likes: %d through the sidecar, %d summed on the new master", likes, sum)
	}
	if len(load.errs) > 0 {
		first, last := load.errs[0], load.errs[len(load.errs)-1]
		for _, e := range load.errs {
			first, last = minTime(first, e), maxTime(last, e)
		}
		var kinds []string
		for k, n := range load.errKinds {
			kinds = append(kinds, fmt.Sprintf("%dx %q", n, k))
		}
		t.Logf("%d errors from %v to %v after SENTINEL FAILOVER (switch at %v): window %v; %s",
			len(load.errs), first.Sub(start).Round(time.Millisecond), last.Sub(start).Round(time.Millisecond),
			switchedAt.Sub(start).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond), strings.Join(kinds, ", "))
		// Errors belong to the switch: none before the failover was asked
		// for, none later than a second after the sidecar switched.
		if first.Before(start) || last.After(switchedAt.Add(time.Second)) {
			t.Errorf("errors outside the switch: from %v to %v, switch at %v", first.Sub(start), last.Sub(start), switchedAt.Sub(start))
		}
	} else {
		t.Log("no client saw an error")
	}
}

// splitSum is the split counter "likes" (splitTable) summed directly:
// its base key and its 4 shards.
func splitSum(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	keys := append([]string{"likes"}, routing.ShardKeys("likes", routing.Generation{FromEpoch: 0, Shards: 4})...)
	vals, err := c.MGet(context.Background(), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for i, v := range vals {
		if v == nil {
			continue
		}
		n, err := strconv.ParseInt(v.(string), 10, 64)
		if err != nil {
			t.Fatalf("%s = %v: %v", keys[i], v, err)
		}
		sum += n
	}
	return sum
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
