package engine_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// versions writes increasing versions of a key to the master, around the
// engine (so no read-your-writes rule hides a lagging replica), and keeps
// when each was acknowledged.
type versions struct {
	mu    sync.Mutex
	acked []time.Time // acked[n]: SET key n returned
}

// writeFor writes versions every 2 ms for d (at most 20,000 writes).
func (w *versions) writeFor(t *testing.T, c *redis.Client, key string, d time.Duration) {
	tk := time.NewTicker(2 * time.Millisecond)
	defer tk.Stop()
	end := time.Now().Add(d)
	for i := 0; i < 20_000 && time.Now().Before(end); i++ {
		w.mu.Lock()
		n := len(w.acked)
		w.mu.Unlock()
		if err := c.Set(context.Background(), key, strconv.Itoa(n), 0).Err(); err != nil {
			t.Error(err)
			return
		}
		w.mu.Lock()
		w.acked = append(w.acked, time.Now())
		w.mu.Unlock()
		<-tk.C
	}
}

// staleness is how long before at the master had acknowledged a version
// newer than v (0: v was the newest at at; -1: the key missing). The acknowledgement time is
// taken when SET returned, after the master applied it, so this never
// overstates what a read missed.
func (w *versions) staleness(v int, at time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v+1 >= len(w.acked) || !w.acked[v+1].Before(at) {
		return 0
	}
	return at.Sub(w.acked[v+1])
}

// readStats is what a run of reads found.
type readStats struct {
	reads, stale int
	worst        time.Duration
}

// readFor reads key through e every interval for d (at most 20,000
// reads) and fails the test at any read staler than bound.
func (w *versions) readFor(t *testing.T, e *engine.Engine, key string, d, every, bound time.Duration) readStats {
	t.Helper()
	var st readStats
	tk := time.NewTicker(every)
	defer tk.Stop()
	end := time.Now().Add(d)
	for i := 0; i < 20_000 && time.Now().Before(end); i++ {
		at := time.Now()
		b, found, err := e.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		v := -1 // missing: older than the first version
		if found {
			if v, err = strconv.Atoi(string(b)); err != nil {
				t.Fatalf("read %q: %v", b, err)
			}
		}
		st.reads++
		if s := w.staleness(v, at); s > 0 {
			st.stale++
			st.worst = max(st.worst, s)
			if s > bound {
				t.Fatalf("read %d returned version %d, which a version acknowledged %v before the read replaced: over the bound of %v", i, v, s, bound)
			}
		}
		<-tk.C
	}
	return st
}

// TestReplicaReadsStaleBound: no read through the engine is staler than
// maxLag plus one check interval, with a replica that stops applying the
// replication stream (CLIENT PAUSE WRITE: it stays linked and answers ROLE
// and GET, with old data) while writes go on. Two ways in: an engine that
// starts while the replica is already 10 × maxLag behind (its first check
// has one sample, and a replica behind it must not be taken as current),
// and a replica paused three times for 10 × maxLag under an engine that
// reads it (the bound counts from what the replica is known to hold, not
// from the lag's lower bound, which lets a read an interval past it). Every
// read's value is checked against when the version after it was
// acknowledged.
func TestReplicaReadsStaleBound(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	const (
		check  = 100 * time.Millisecond
		maxLag = 220 * time.Millisecond
		bound  = maxLag + check
		pause  = 10 * maxLag
	)
	r := redistest.Replicated(t, 1)
	rep := r.ReplicaAddrs()[0]
	mc := redis.NewClient(&redis.Options{Addr: r.Master.Addr})
	defer mc.Close()
	w := &versions{}

	// The replica stops applying, the writes go on for 10 × maxLag, and
	// only then does an engine start.
	if _, err := redisproc.Command(rep, "CLIENT", "PAUSE", strconv.Itoa(int(4*pause/time.Millisecond)), "WRITE"); err != nil {
		t.Fatal(err)
	}
	w.writeFor(t, mc, "hot", pause)
	resetStats(t, rep)
	e := engine.New(mc, engine.Options{})
	defer e.Close()
	tbl := replicaTable(0, r.ReplicaAddrs(), "hot")
	tbl.Replicas.CheckMillis = check.Milliseconds()
	tbl.Entries[0].ReplicaReads.MaxLagMillis = maxLag.Milliseconds()
	e.SetTable(tbl)
	var wg sync.WaitGroup
	defer wg.Wait() // before the client closes, whatever ends the test
	wg.Add(1)
	go func() { defer wg.Done(); w.writeFor(t, mc, "hot", pause) }()
	st := w.readFor(t, e, "hot", pause, time.Millisecond, bound)
	wg.Wait()
	if n := getCalls(t, rep); n != 0 {
		t.Fatalf("the replica %v behind at the engine's start served %d of %d reads", pause, n, st.reads)
	}
	t.Logf("start behind: %d reads, none from the replica", st.reads)

	// The replica catches up and serves; then it is paused three times
	// for 10 × maxLag, writes and reads going on throughout.
	if _, err := redisproc.Command(rep, "CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		eventually.True(t, 20*time.Second, "the replica serves reads again", func() bool {
			resetStats(t, rep)
			w.readFor(t, e, "hot", 20*time.Millisecond, time.Millisecond, bound)
			return getCalls(t, rep) > 0
		})
		if _, err := redisproc.Command(rep, "CLIENT", "PAUSE", strconv.Itoa(int(pause/time.Millisecond)), "WRITE"); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); w.writeFor(t, mc, "hot", pause+bound) }()
		st := w.readFor(t, e, "hot", pause+bound, time.Millisecond, bound)
		wg.Wait()
		t.Logf("pause %d: %d reads, %d stale (within the bound), the stalest %v behind; bound %v", round, st.reads, st.stale, st.worst, bound)
		if st.stale == 0 {
			t.Fatalf("pause %d: no read was stale at all: the paused replica was never read, which is not what this checks", round)
		}
	}
}

// TestReplicaReadsLongMaxLag: with a maxLag of 70 check intervals (past
// the 64 offsets the history once kept), a replica that stops applying is
// read until it is maxLag plus one interval behind, and never after: the
// history reaches that far back, and a replica behind all of it is not
// taken as being only the history's age behind.
func TestReplicaReadsLongMaxLag(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	const (
		check  = 100 * time.Millisecond
		maxLag = 70 * check
		bound  = maxLag + check
	)
	r := redistest.Replicated(t, 1)
	rep := r.ReplicaAddrs()[0]
	mc := redis.NewClient(&redis.Options{Addr: r.Master.Addr})
	defer mc.Close()
	w := &versions{}
	w.writeFor(t, mc, "hot", 10*time.Millisecond)
	e := engine.New(mc, engine.Options{})
	defer e.Close()
	tbl := replicaTable(0, r.ReplicaAddrs(), "hot")
	tbl.Replicas.CheckMillis = check.Milliseconds()
	tbl.Entries[0].ReplicaReads.MaxLagMillis = maxLag.Milliseconds()
	e.SetTable(tbl)
	eventually.True(t, 20*time.Second, "the replica serves reads", func() bool {
		resetStats(t, rep)
		w.readFor(t, e, "hot", 20*time.Millisecond, time.Millisecond, bound)
		return getCalls(t, rep) > 0
	})
	if _, err := redisproc.Command(rep, "CLIENT", "PAUSE", strconv.Itoa(int(3*maxLag/time.Millisecond)), "WRITE"); err != nil {
		t.Fatal(err)
	}
	defer redisproc.Command(rep, "CLIENT", "UNPAUSE")
	var wg sync.WaitGroup
	defer wg.Wait()
	run := maxLag + 2*time.Second
	wg.Add(1)
	go func() { defer wg.Done(); w.writeFor(t, mc, "hot", run) }()
	// Reads every 10 ms: the point is the end of the pause, not the rate.
	st := w.readFor(t, e, "hot", run, 10*time.Millisecond, bound)
	t.Logf("%d reads, %d stale (within the bound), the stalest %v behind; bound %v", st.reads, st.stale, st.worst, bound)
	if st.worst < maxLag/2 {
		t.Fatalf("the stalest read was %v behind: the paused replica was not read long enough to check the bound", st.worst)
	}
}
