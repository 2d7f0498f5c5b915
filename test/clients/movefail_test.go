package clients

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// reportInterval is the policies' report interval (newPod), and
// recoverWithin the bound TestFailingSplitPathRolledBack puts on its
// clients' INCR failures after the stop: one report interval. Only the
// increments in flight when the node dies may fail (the others go to a
// place still up); before the engine redirected them, failures went on for
// 3.5-6.5 s, and 15-46 s before it failed fast.
//
// withdrawWithin bounds the withdrawal of the split whose reads fail,
// from the evidence the manager's rule needs (the fifth failed GET of the
// counter: decide's minFailed, judged against the direct reads, none of
// which fail) to the sidecar obeying the table without the split: one
// report interval. What it takes: the sidecar's flush (100 ms), the
// agent's summary sent at once (at its next tick at most), the pass and
// the table, with nothing waiting for a report interval. Measured 0.05 s
// on a quiet machine, 0.11-0.12 s at load averages of 10-13 and
// 0.20-0.28 s at 15-16 on the 2 cores. Before the agent judged its urgent
// summaries on the failures it had sent within the last interval too
// (summary.MoveUrgentWithRecent), failures that trickled in at fewer than
// 5 a summary waited for the interval (0.36-0.44 s at load 18); before
// the manager judged reads apart from the increments and the agent sent
// at once, 0.89 s quiet (1.1-1.8 s from the first failed GET, after 25-40
// failed GETs) and up to never. What precedes the evidence is the
// clients' rate of failing reads (4 a round of 100 ms here, 4 to 8 a
// second under load), which is not heatsink's to set.
const (
	reportInterval = 500 * time.Millisecond
	recoverWithin  = reportInterval
	withdrawWithin = reportInterval
)

// forcedSplitInForce schedules a 4-shard split of key in s's policy and
// waits until the sidecar serves under the table that holds it; it
// returns the split's shard keys.
func forcedSplitInForce(t *testing.T, s *stack, key string) []string {
	t.Helper()
	forceSplit(t, s.pod, key)
	var shards []string
	eventually.True(t, 30*time.Second, "the forced split is in force in the sidecar", func() bool {
		tbl := s.pod.table(t)
		if tbl == nil {
			return false
		}
		e := tbl.Lookup(key)
		if e == nil || e.Split == nil || len(e.Split.Generations) == 0 || s.routingVersion() < tbl.Version {
			return false
		}
		shards = routing.ShardKeys(key, e.Split.Generations[len(e.Split.Generations)-1])
		return len(shards) > 0
	})
	return shards
}

// TestFailingSplitPathRolledBack: a split counter whose shards partly live
// on a master that is stopped, in a real 3-master cluster, driven by
// go-redis ClusterClient in its default configuration through a real
// sidecar, node agent and manager, beside direct GETs of keys on the
// masters still up. (The masters still up are told to serve their slots
// while one is down, cluster-require-full-coverage no, so that the direct
// traffic stays a baseline that succeeds.)
//
// The clients' INCRs fail only within recoverWithin (one report interval)
// of the stop, if at all: an increment whose shard's node refuses it goes
// to another place of the counter (engine placeAfterFailure), and the
// count stays exact: the places still up hold every acknowledged increment
// but those the lost shards held at the stop. The counter's GETs, which
// sum every shard, fail; the sidecar reports them as failed reads on the
// split's path with the direct GETs (none failed) as the baseline, and
// the manager withdraws the split and says why in status: the sidecar
// obeys the table without the split within withdrawWithin (one report
// interval) of the fifth failed GET of the counter, the evidence its rule
// needs.
func TestFailingSplitPathRolledBack(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	cl := redistest.Cluster(t)
	up := upstream{name: "cluster", cluster: true, addrs: cl.Addrs()}
	prefix := "movefail:"
	s := startSidecar(t, up, "movefail-split", prefix)
	ctr := prefix + "ctr"
	ctx := context.Background()
	shards := forcedSplitInForce(t, s, ctr)

	dc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: up.addrs})
	defer dc.Close()
	nodeOf := func(key string) string {
		n, err := dc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	home := nodeOf(ctr)
	var stopped string
	onStopped := 0
	for _, k := range shards {
		if a := nodeOf(k); a != home && (stopped == "" || a == stopped) {
			stopped = a
			onStopped++
		}
	}
	if stopped == "" {
		t.Fatalf("every shard of %s on its own master %s", ctr, home)
	}
	var plain []string
	for i := 0; len(plain) < 10; i++ {
		if k := fmt.Sprint("mfplain:", i); nodeOf(k) != stopped {
			plain = append(plain, k)
		}
	}
	for _, a := range up.addrs {
		direct(t, upstream{addrs: []string{a}}, func(c redis.UniversalClient) error {
			return c.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err()
		})
	}

	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr}})
	defer c.Close()
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
	var incrs, failed, okSince, gets, getFailed, ctrGets, ctrGetFailed int
	var stoppedAt, recoveredAt, firstFailed, lastFailed time.Time
	var ctrFailedAt []time.Time // the replies of the counter's failed GETs
	var firstErr error
	// round sends 40 INCR and 40 GET of plain keys from 4 goroutines
	// (go-redis pools connections), and 4 GET of the counter (a read of
	// every shard): enough commands in each 500-ms report interval for the
	// manager to judge the split's failures against the plain GETs'.
	round := func() {
		<-pace.C
		type res struct {
			incrFailed, getFailed bool
			incrErr               error
		}
		out := make(chan res, 40)
		ctrFailed := make(chan time.Time, 4) // when a GET of the counter failed (zero: it did not)
		for g := range 4 {
			go func() {
				for i := range 10 {
					var r res
					r.incrErr = c.Incr(ctx, ctr).Err()
					r.incrFailed = r.incrErr != nil
					err := c.Get(ctx, plain[(g+i)%len(plain)]).Err()
					r.getFailed = err != nil && err != redis.Nil
					out <- r
				}
				var at time.Time
				if c.Get(ctx, ctr).Err() != nil {
					at = time.Now()
				}
				ctrFailed <- at
			}()
		}
		for range 4 {
			ctrGets++
			if at := <-ctrFailed; !at.IsZero() {
				ctrGetFailed++
				ctrFailedAt = append(ctrFailedAt, at)
			}
		}
		for range 40 {
			r := <-out
			incrs++
			gets++
			if r.incrFailed {
				failed++
				okSince = 0
				if firstFailed.IsZero() {
					firstFailed, firstErr = time.Now(), r.incrErr
				}
				lastFailed = time.Now()
			} else {
				okSince++
			}
			if r.getFailed {
				getFailed++
			}
		}
	}
	at := time.Now()
	for range 10 { // the split serves, every master up
		round()
	}
	t.Logf("every master up: %d INCR and %d GET in %v", incrs, gets, time.Since(at).Round(time.Millisecond))
	if failed != 0 || getFailed != 0 || ctrGetFailed != 0 {
		t.Fatalf("every master up: %d of %d INCR, %d of %d GET and %d of %d GET of %s failed", failed, incrs, getFailed, gets, ctrGetFailed, ctrGets, ctr)
	}
	// What the shards on the master about to stop hold (no command is in
	// flight between rounds): their part of the count, lost with the
	// node's memory.
	var lost int64
	for _, k := range shards {
		if nodeOf(k) == stopped {
			v, err := dc.Get(ctx, k).Int64()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			lost += v
		}
	}
	for _, srv := range cl.Servers {
		if srv.Addr == stopped {
			srv.Stop()
		}
	}
	stoppedAt = time.Now()
	incrsAtStop, ctrGetsAtStop := incrs, ctrGets
	t.Logf("stopped %s, the master of %d of the %d shards of %s (its own master %s is up)", stopped, onStopped, len(shards), ctr, home)
	deadline := time.Now().Add(60 * time.Second)
	var why string
	before := s.reports.movedOf(ctr)
	// The pipeline's steps as seen from outside, each checked after a
	// round: the sidecar reports a failure, the manager withdraws (status),
	// publishes a table without the split, the sidecar obeys it.
	var reportedAt, withdrawnAt, publishedAt, appliedAt time.Time
	var withdrawal int64 // the version of the first table seen without the split
	// When the sidecar obeyed each table version, sampled every 10 ms
	// until the loop below ends (a round takes 100-500 ms: too coarse to
	// measure the withdrawal against withdrawWithin).
	obeyed := sampleRoutingVersion(t, s)
	for okSince < 300 || !strings.Contains(why, "failed on its path") {
		if time.Now().After(deadline) {
			t.Fatalf("after %d INCR (%d failed, %d served since) and %d GET (%d failed): status %q; the sidecar reported %+v",
				incrs, failed, okSince, gets, getFailed, why, s.reports.movedOf(ctr))
		}
		round()
		if okSince >= 300 && recoveredAt.IsZero() {
			recoveredAt = time.Now()
		}
		why = statusReason(t, s, ctr)
		if reportedAt.IsZero() && s.reports.movedOf(ctr).Failed > before.Failed {
			reportedAt = time.Now()
		}
		if withdrawnAt.IsZero() && strings.Contains(why, "failed on its path") {
			withdrawnAt = time.Now()
		}
		if tbl := s.pod.table(t); tbl != nil && publishedAt.IsZero() && !splitIn(tbl, ctr) {
			publishedAt, withdrawal = time.Now(), tbl.Version
		}
		if tbl := s.pod.table(t); tbl != nil && !publishedAt.IsZero() && appliedAt.IsZero() && s.routingVersion() >= tbl.Version {
			appliedAt = time.Now()
		}
	}
	// The loop ends on the status; the table and the sidecar may follow a
	// little later.
	withdrawal, obeyedAt := obeyedWithout(t, s, ctr, withdrawal, obeyed)
	after := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return at.Sub(stoppedAt).Round(100 * time.Millisecond).String()
	}
	slices.SortFunc(ctrFailedAt, time.Time.Compare)
	failedBefore := 0 // the counter's GETs failed before the sidecar obeyed
	for _, at := range ctrFailedAt {
		if at.Before(obeyedAt) {
			failedBefore++
		}
	}
	if len(ctrFailedAt) < minFailed {
		t.Fatalf("%d GETs of %s failed after the stop, want at least %d", len(ctrFailedAt), ctr, minFailed)
	}
	first, evidence := ctrFailedAt[0], ctrFailedAt[minFailed-1]
	took := obeyedAt.Sub(evidence)
	t.Logf("the split withdrawn in the sidecar (table version %d) %v after the GET of %s that failed %s, %v after its first failed GET, %v after the stop, after %d failed GETs of it",
		withdrawal, took.Round(10*time.Millisecond), ctr, fmt.Sprintf("%dth", minFailed), obeyedAt.Sub(first).Round(10*time.Millisecond), obeyedAt.Sub(stoppedAt).Round(10*time.Millisecond), failedBefore)
	if took > withdrawWithin {
		t.Errorf("the sidecar obeyed the table without the split %v after the %s failed GET of %s, want within %v",
			took.Round(10*time.Millisecond), fmt.Sprintf("%dth", minFailed), ctr, withdrawWithin)
	}
	t.Logf("after the stop: first INCR failure %s (%v), first failure reported by the sidecar %s, status withdrawn %s, table without the split published %s, obeyed by the sidecar %s, last INCR failure %s; %d of the %d INCR sent after it failed; 300 INCR in a row served %s after the stop (%d GET of %d failed; %d of the %d GET of %s sent after the stop); status: %q",
		after(firstFailed), firstErr, after(reportedAt), after(withdrawnAt), after(publishedAt), after(appliedAt), after(lastFailed),
		failed, incrs-incrsAtStop, after(recoveredAt), getFailed, gets, ctrGetFailed, ctrGets-ctrGetsAtStop, ctr, why)
	if d := lastFailed.Sub(stoppedAt); failed > 0 && d > recoverWithin {
		t.Errorf("the clients' INCR failed until %v after the stop, want within %v", d.Round(100*time.Millisecond), recoverWithin)
	}
	// Exact: every acknowledged INCR is in a place still up (a fold moves
	// them between places, so the sum is read until no fold is in flight)
	// or was in the lost shards before the stop.
	eventually.Succeeds(t, 30*time.Second, func() error {
		sum := lost
		for _, k := range append([]string{ctr}, shards...) {
			if nodeOf(k) == stopped {
				continue
			}
			v, err := dc.Get(ctx, k).Int64()
			if err != nil && err != redis.Nil {
				return err
			}
			sum += v
		}
		if acked := int64(incrs - failed); sum != acked {
			return fmt.Errorf("the places still up hold %d and the lost shards held %d: %d, want the %d acknowledged INCRs", sum-lost, lost, sum, acked)
		}
		return nil
	})
	if tbl := s.pod.table(t); tbl != nil && splitIn(tbl, ctr) {
		t.Errorf("the counter is still split in the table: %+v", tbl.Lookup(ctr).Split)
	}
}

// minFailed is the fewest failures on a move's path the manager's rule
// judges (controllers/decide minFailed).
const minFailed = 5

// splitIn reports whether tbl splits key: its write generation has shards.
func splitIn(tbl *routing.Table, key string) bool {
	e := tbl.Lookup(key)
	return e != nil && e.Split != nil && len(e.Split.Generations) > 0 && e.Split.Generations[len(e.Split.Generations)-1].Shards > 0
}

// splitEffective reports whether tbl splits key and its write generation
// has been taking writes since an epoch before the one at now.
func splitEffective(tbl *routing.Table, key string, now time.Time) bool {
	if !splitIn(tbl, key) {
		return false
	}
	gens := tbl.Lookup(key).Split.Generations
	return tbl.EpochAt(now) > gens[len(gens)-1].FromEpoch
}

// obeyedWithout waits until s obeys a table that does not split key, and
// returns its version (withdrawal, when already known, else the first such
// table seen) and when s first obeyed it, by obeyed (sampleRoutingVersion).
func obeyedWithout(t *testing.T, s *stack, key string, withdrawal int64, obeyed func(v int64) time.Time) (int64, time.Time) {
	t.Helper()
	eventually.True(t, 30*time.Second, "the sidecar obeys a table without the split", func() bool {
		if withdrawal == 0 {
			if tbl := s.pod.table(t); tbl != nil && !splitIn(tbl, key) {
				withdrawal = tbl.Version
			}
		}
		return withdrawal > 0 && s.routingVersion() >= withdrawal
	})
	at := obeyed(withdrawal)
	if at.IsZero() { // obeyed between the sampler's last look and its stop
		at = time.Now()
	}
	return withdrawal, at
}

// sampleRoutingVersion samples the version of the table s obeys every
// 10 ms until the returned function is called (or the test ends); that
// function stops the sampling and returns when s first obeyed version v or
// a later one (zero: never seen).
func sampleRoutingVersion(t *testing.T, s *stack) func(v int64) time.Time {
	type sample struct {
		at      time.Time
		version int64
	}
	stop, done := make(chan struct{}), make(chan []sample, 1)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(stop) }) })
	go func() {
		var got []sample
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- got
				return
			case <-tick.C:
			}
			if v := s.routingVersion(); len(got) == 0 || v != got[len(got)-1].version {
				got = append(got, sample{time.Now(), v})
			}
		}
	}()
	return func(v int64) time.Time {
		once.Do(func() { close(stop) })
		for _, smp := range <-done {
			if v > 0 && smp.version >= v {
				return smp.at
			}
		}
		return time.Time{}
	}
}

// TestWholeUpstreamFailingKeepsTheSplit: the other side of the rule. A
// schedule's split counter on a standalone Redis, whose every shard lives
// on the one node with the counter and the direct traffic (go-redis
// defaults through a real sidecar, node agent and manager): the node is
// stopped, and the split's INCRs and the direct GETs all fail alike, as in
// a failover or an outage of the whole upstream. The sidecar reports both
// (the baseline failing as much as the split's path), and the manager
// keeps the split over 8 report intervals: withdrawing it would help no
// client, and would withdraw every split of a cluster in every failover.
func TestWholeUpstreamFailingKeepsTheSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	up := upstream{name: "standalone", addrs: []string{srv.Addr}}
	prefix := "movefail-all:"
	s := startSidecar(t, up, "movefail-all", prefix)
	ctr := prefix + "ctr"
	ctx := context.Background()
	forcedSplitInForce(t, s, ctr)
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
	var incrs, failed, gets, getFailed int
	// round sends 40 INCR and 40 GET from 8 goroutines: with the node
	// down each command waits for the engine's or the proxy's dials to be
	// refused, and the manager must get enough of both in each report
	// interval for its rule to judge them.
	round := func() {
		<-pace.C
		type res struct{ incrFailed, getFailed bool }
		out := make(chan res, 40)
		for g := range 8 {
			go func() {
				for i := range 5 {
					var r res
					r.incrFailed = c.Incr(ctx, ctr).Err() != nil
					err := c.Get(ctx, fmt.Sprint("mfall:", g*5+i)).Err()
					r.getFailed = err != nil && err != redis.Nil
					out <- r
				}
			}()
		}
		for range 40 {
			r := <-out
			incrs++
			gets++
			if r.incrFailed {
				failed++
			}
			if r.getFailed {
				getFailed++
			}
		}
	}
	for range 5 {
		round()
	}
	if failed != 0 || getFailed != 0 {
		t.Fatalf("the node up: %d of %d INCR and %d of %d GET failed", failed, incrs, getFailed, gets)
	}
	before := s.reports.movedOf(ctr)
	srv.Stop()
	stoppedAt := time.Now()
	for time.Since(stoppedAt) < 6*time.Second { // 12 report intervals
		round()
		if why := statusReason(t, s, ctr); strings.Contains(why, "withdrawn") {
			t.Fatalf("the whole upstream down (%d of %d INCR, %d of %d GET failed): %q, want the split kept", failed, incrs, getFailed, gets, why)
		}
	}
	after := s.reports.movedOf(ctr)
	t.Logf("the node stopped: %d of %d INCR and %d of %d GET failed; the sidecar reported %d of %d served failed, baseline %d of %d",
		failed, incrs, getFailed, gets, after.Failed-before.Failed, after.Served-before.Served, after.BaseFailed-before.BaseFailed, after.BaseTotal-before.BaseTotal)
	if after.Failed-before.Failed < 100 || after.BaseFailed-before.BaseFailed < 100 {
		t.Fatalf("the sidecar reported %+v (before the stop %+v): want both paths' failures reported", after, before)
	}
	if tbl := s.pod.table(t); tbl == nil || tbl.Lookup(ctr) == nil || tbl.Lookup(ctr).Split == nil {
		t.Errorf("the split is gone from the table while everything failed alike")
	}
}
