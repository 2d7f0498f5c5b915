package clients

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRefusedQueueSplitRolledBackAndHeld: a schedule forces a split on a
// key that is a job queue (go-redis LPUSH + RPOP through a real sidecar,
// node agent and manager, standalone Redis). The sidecar counts the LPUSH
// it refuses because of the split and reports them per key (counts
// datagram v4), the node agent passes them on (summary v4), and the
// manager rolls the split back, saying in status how many were refused:
// the sidecar obeys the table without the split within one report interval
// (withdrawWithin) of the first refused LPUSH's reply, the evidence the
// manager's rule needs (any refusal), and the clients recover without a
// restart. Measured 0.06-0.11 s (4 runs, load 3-5); before the agent sent
// a refusal at once and the hub asked for a pass on it, 0.10-0.20 s in 2
// runs, and up to a report interval more when the summary waited for it.
// Then the queue's clients stop for longer than the detection window (no
// family seen any more) and come back: the split is held until the
// cooldown, so none of their LPUSH is refused again (before the hold
// applied to scheduled keys, the schedule split the silent queue again).
func TestRefusedQueueSplitRolledBackAndHeld(t *testing.T) {
	up := upstreams(t)[0]
	prefix := "rollback:"
	s := startSidecar(t, up, "rollback-split", prefix)
	queue := prefix + "queue:jobs"
	ctx := context.Background()
	forceQueueSplit(t, s, queue)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr}})
	defer c.Close()
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
	var pushes, refused, okSince int
	var firstRefused time.Time
	// round pushes and pops 10 jobs, counting the LPUSH refused.
	round := func() {
		<-pace.C
		for i := range 10 {
			pushes++
			err := c.LPush(ctx, queue, i).Err()
			if err == nil {
				okSince++
				_ = c.RPop(ctx, queue).Err()
				continue
			}
			if !strings.Contains(err.Error(), "mitigated by split") {
				t.Fatalf("LPUSH: %v", err)
			}
			if refused == 0 {
				firstRefused = time.Now()
			}
			refused++
			okSince = 0
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	var why string
	obeyed := sampleRoutingVersion(t, s)
	for refused == 0 || okSince < 300 || !strings.Contains(why, "refused because of it") {
		if time.Now().After(deadline) {
			t.Fatalf("after %d LPUSH (%d refused, %d served since): status %q", pushes, refused, okSince, why)
		}
		round()
		why = statusReason(t, s, queue)
	}
	t.Logf("the forced split refused %d of %d LPUSH, then rolled back: %q", refused, pushes, why)
	withdrawal, obeyedAt := obeyedWithout(t, s, queue, 0, obeyed)
	took := obeyedAt.Sub(firstRefused)
	t.Logf("the split withdrawn in the sidecar (table version %d) %v after the first refused LPUSH", withdrawal, took.Round(10*time.Millisecond))
	if took > withdrawWithin {
		t.Errorf("the sidecar obeyed the table without the split %v after the first refused LPUSH, want within %v", took.Round(10*time.Millisecond), withdrawWithin)
	}

	// The clients stop for longer than the window and its fade (the node
	// agent keeps a key's families for one to two 2-s windows), then come
	// back for 3 s: none of their commands is refused.
	before := refused
	quiet := time.NewTimer(6 * time.Second)
	<-quiet.C
	for range 30 {
		round()
	}
	if n := refused - before; n != 0 {
		t.Errorf("the queue's clients came back within the cooldown: %d of 300 LPUSH refused, want none (the split must be held)", n)
	}
	if tbl := s.pod.table(t); tbl != nil && splitIn(tbl, queue) {
		t.Errorf("the queue is split again within the cooldown: %+v", tbl.Lookup(queue).Split)
	}
}
