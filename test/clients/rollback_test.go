package clients

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
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
	q := refusedUntilWithdrawn(t, s, prefix+"queue:jobs")

	// The clients stop for longer than the window and its fade (the node
	// agent keeps a key's families for one to two 2-s windows), then come
	// back for 3 s: none of their commands is refused.
	before := q.refused
	quiet := time.NewTimer(6 * time.Second)
	<-quiet.C
	for range 30 {
		q.round()
	}
	if n := q.refused - before; n != 0 {
		t.Errorf("the queue's clients came back within the cooldown: %d of 300 LPUSH refused, want none (the split must be held)", n)
	}
	if tbl := s.pod.table(t); tbl != nil && splitIn(tbl, q.key) {
		t.Errorf("the queue is split again within the cooldown: %+v", tbl.Lookup(q.key).Split)
	}
}

// TestGoneTargetsDoNotDelayAWithdrawal: the manager serves policies whose
// Redis is gone for good: six policies, each with a split in force, whose
// Redis is stopped, then deleted, so that every drain of theirs is blocked
// and retried (Degraded, RedisUnavailable). Meanwhile another policy's
// forced split of a queue is withdrawn within one report interval of the
// first refused LPUSH, as it is alone. Before the manager's Redis clients
// dialled once per attempt (go-redis dials 5 times, 100 ms apart: 1.7 s
// per op on a Redis that refuses) and blocked drains were retried at the
// margin (controller-runtime's error backoff retried them from 5 ms on),
// such drains held the reconcile workers: in CI a withdrawal came 4.03 s
// after the first refused LPUSH, with three gone targets of earlier tests;
// this test measured 5.15 s on that code, and 0.20 s now.
func TestGoneTargetsDoNotDelayAWithdrawal(t *testing.T) {
	up := upstreams(t)[0]
	gone := redistest.Standalone(t)
	f := startFleet(t)
	var pods []*pod
	for i := range 6 {
		p := f.newPod(t, fmt.Sprintf("gone-%d", i), upstream{name: "gone", addrs: []string{gone.Addr}}, "gone:")
		forceSplit(t, p, "gone:q")
		pods = append(pods, p)
	}
	// In force, not only published: a generation no write could reach yet
	// is dropped without a fold, so the drain would not need Redis.
	for _, p := range pods {
		eventually.True(t, 30*time.Second, "the gone policy's split is in force", func() bool {
			tbl := p.table(t)
			return tbl != nil && splitEffective(tbl, "gone:q", time.Now())
		})
	}
	gone.Stop()
	for _, p := range pods {
		p.delete(t)
	}
	for _, p := range pods {
		eventually.True(t, 30*time.Second, "the gone policy's deletion is blocked on its Redis", func() bool { return p.drainBlocked(t) })
	}
	prefix := "alive:"
	s := startSidecar(t, up, "alive-split", prefix)
	refusedUntilWithdrawn(t, s, prefix+"queue:jobs")
	for _, p := range pods {
		if !p.drainBlocked(t) {
			t.Errorf("policy %s: its deletion is no longer blocked, so it did not compete with the withdrawal", p.policy)
		}
	}
}

// queueLoad is a job queue's clients (go-redis LPUSH + RPOP, through a
// sidecar), counting the LPUSH refused because of a split.
type queueLoad struct {
	t                        *testing.T
	c                        *redis.ClusterClient
	key                      string
	pace                     *time.Ticker
	pushes, refused, okSince int
	firstRefused             time.Time
}

// round pushes and pops 10 jobs, 100 ms after the last round.
func (q *queueLoad) round() {
	q.t.Helper()
	ctx := context.Background()
	<-q.pace.C
	for i := range 10 {
		q.pushes++
		err := q.c.LPush(ctx, q.key, i).Err()
		if err == nil {
			q.okSince++
			_ = q.c.RPop(ctx, q.key).Err()
			continue
		}
		if !strings.Contains(err.Error(), "mitigated by split") {
			q.t.Fatalf("LPUSH: %v", err)
		}
		if q.refused == 0 {
			q.firstRefused = time.Now()
		}
		q.refused++
		q.okSince = 0
	}
}

// forcedQueueLoad forces a split of queue in s's policy and returns its
// clients once the sidecar obeys it (forcedSplitInForce): had their
// commands come first, the manager would know the queue and not split it.
func forcedQueueLoad(t *testing.T, s *stack, queue string) *queueLoad {
	t.Helper()
	forcedSplitInForce(t, s, queue)
	q := &queueLoad{t: t, c: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr}}), key: queue, pace: time.NewTicker(100 * time.Millisecond)}
	t.Cleanup(func() { q.c.Close(); q.pace.Stop() })
	return q
}

// refusedUntilWithdrawn forces a split of queue in s's policy and drives
// the queue's clients (forcedQueueLoad) until the split is withdrawn and
// they recover (300 LPUSH served in a row, status saying why); the sidecar
// must obey the table without the split within withdrawWithin of the first
// refused LPUSH.
func refusedUntilWithdrawn(t *testing.T, s *stack, queue string) *queueLoad {
	t.Helper()
	q := forcedQueueLoad(t, s, queue)
	deadline := time.Now().Add(90 * time.Second)
	var why string
	obeyed := sampleRoutingVersion(t, s)
	for q.refused == 0 || q.okSince < 300 || !strings.Contains(why, "refused because of it") {
		if time.Now().After(deadline) {
			t.Fatalf("after %d LPUSH (%d refused, %d served since): status %q", q.pushes, q.refused, q.okSince, why)
		}
		q.round()
		why = statusReason(t, s, queue)
	}
	t.Logf("the forced split refused %d of %d LPUSH, then rolled back: %q", q.refused, q.pushes, why)
	withdrawal, obeyedAt := obeyedWithout(t, s, queue, 0, obeyed)
	took := obeyedAt.Sub(q.firstRefused)
	t.Logf("the split withdrawn in the sidecar (table version %d) %v after the first refused LPUSH", withdrawal, took.Round(10*time.Millisecond))
	if took > withdrawWithin {
		t.Errorf("the sidecar obeyed the table without the split %v after the first refused LPUSH, want within %v", took.Round(10*time.Millisecond), withdrawWithin)
	}
	return q
}
