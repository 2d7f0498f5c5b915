package clients

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestWriteHotQueueIsNotSplit: go-redis' ClusterClient (default
// configuration) uses one key as a job queue (LPUSH + RPOP) and another as
// a counter (INCR), both write-hot, through a real sidecar, its real node
// agent and the real manager, against a standalone Redis and a 3-master
// cluster. The sidecar reports each key's command families; the manager
// splits the counter as before, but not the queue, whose order a split
// would break: the queue is listed in the policy's status with why, and
// not one of its commands is refused (before command families, the queue
// was split like the counter and its LPUSH refused).
func TestWriteHotQueueIsNotSplit(t *testing.T) {
	for _, up := range upstreams(t) {
		t.Run(up.name, func(t *testing.T) {
			prefix := "fam-" + up.name + ":"
			s := startSidecar(t, up, "families-"+up.name, prefix)
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr}})
			defer c.Close()
			ctx := context.Background()
			queue, ctr := prefix+"queue:jobs", prefix+"ctr"
			var pushes, pops, incrs, refused int
			var lastErr error
			round := func() {
				for i := range 10 {
					if err := c.LPush(ctx, queue, i).Err(); err != nil {
						refused, lastErr = refused+1, err
					}
					pushes++
					if err := c.RPop(ctx, queue).Err(); err != nil && !errors.Is(err, redis.Nil) {
						refused, lastErr = refused+1, err
					}
					pops++
					if err := c.Incr(ctx, ctr).Err(); err != nil {
						refused, lastErr = refused+1, err
					}
					incrs++
				}
			}
			var withheld string
			queueSplit := false
			deadline := time.Now().Add(90 * time.Second)
			pace := time.NewTicker(100 * time.Millisecond) // 100 writes/s per key: 20 × the threshold
			defer pace.Stop()
			splitInForce := func() bool {
				tbl := s.pod.table(t)
				if tbl == nil || s.routingVersion() < tbl.Version {
					return false
				}
				if e := tbl.Lookup(queue); e != nil && (e.Split != nil || e.PreAggregate != nil) {
					queueSplit = true
				}
				return splitEffective(tbl, ctr, time.Now())
			}
			for !(splitInForce() && withheld != "") {
				if time.Now().After(deadline) {
					t.Fatalf("after %d LPUSH: counter split in force %v, queue's reason %q, %d commands refused (%v)", pushes, splitInForce(), withheld, refused, lastErr)
				}
				<-pace.C
				round()
				withheld = statusReason(t, s, queue)
			}
			// A few more rounds under the table in force: the counter's
			// commands are served split, the queue's raw.
			for range 10 {
				<-pace.C
				round()
				splitInForce()
			}
			t.Logf("%s: %d LPUSH, %d RPOP, %d INCR through the sidecar, %d refused; the counter split, the queue not: %q", up.name, pushes, pops, incrs, refused, withheld)
			if refused != 0 {
				t.Errorf("%d commands refused, the last: %v", refused, lastErr)
			}
			if queueSplit {
				t.Errorf("the queue was split")
			}
			if !strings.Contains(withheld, "order forbids split") {
				t.Errorf("the queue's reason in status is %q, want it to say that order forbids split", withheld)
			}
		})
	}
}

// statusReason is the reason the policy's status gives for key ("" when
// it does not list it).
func statusReason(t *testing.T, s *stack, key string) string {
	t.Helper()
	p := &v1alpha1.HotKeyPolicy{}
	if err := s.pod.f.cp.Client.Get(context.Background(), crclient.ObjectKey{Namespace: namespace, Name: s.pod.policy}, p); err != nil {
		t.Fatalf("policy: %v", err)
	}
	for _, hk := range p.Status.HotKeys {
		if hk.Key == key {
			if len(hk.Families) == 0 {
				return ""
			}
			return fmt.Sprintf("%s (%s)", hk.Reason, strings.Join(hk.Families, ","))
		}
	}
	return ""
}

// TestForcedSplitOfAQueueIsUndone: a schedule forces a split on a key
// that turns out to be a job queue (go-redis LPUSH + RPOP through a real
// sidecar, node agent and manager, standalone Redis). The sidecar refuses
// the queue's commands under the split, but reports their family all the
// same; the manager withdraws the split, says why in status, and the
// clients recover without a restart: their LPUSH succeed again.
func TestForcedSplitOfAQueueIsUndone(t *testing.T) {
	up := upstreams(t)[0]
	prefix := "forced:"
	s := startSidecar(t, up, "forced-split", prefix)
	queue := prefix + "queue:jobs"
	q := forcedQueueLoad(t, s, queue)
	deadline := time.Now().Add(90 * time.Second)
	var recoveredAt time.Time
	for {
		if time.Now().After(deadline) {
			t.Fatalf("after %d LPUSH (%d refused): hurt at %v, recovered at %v, status %q", q.pushes, q.refused, q.firstRefused, recoveredAt, statusReason(t, s, queue))
		}
		q.round()
		// Recovered: refused before, then 3 s of LPUSH all served. The
		// clients go on meanwhile until the status says why (it is written
		// after the table that withdrew the split is published; a queue
		// whose clients stopped would show no families to say it by).
		if q.refused > 0 && q.okSince >= 300 {
			if recoveredAt.IsZero() {
				recoveredAt = time.Now()
			}
			if strings.Contains(statusReason(t, s, queue), "order forbids split") {
				break
			}
		}
	}
	why := statusReason(t, s, queue)
	t.Logf("the forced split refused %d of %d LPUSH; the clients recovered %v after the first refusal; status: %q",
		q.refused, q.pushes, recoveredAt.Sub(q.firstRefused).Round(100*time.Millisecond), why)
	if tbl := s.pod.table(t); tbl != nil {
		if e := tbl.Lookup(queue); e != nil && e.Split != nil {
			t.Errorf("the queue is still split in the table: %+v", e.Split)
		}
	}
}

// forceSplit schedules a split of key in po's policy from now on, for an
// hour (a queue's clients, LPUSH + RPOP, cannot use it).
func forceSplit(t *testing.T, po *pod, key string) {
	t.Helper()
	ctx := context.Background()
	cl := po.f.cp.Client
	p := &v1alpha1.HotKeyPolicy{}
	if err := cl.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: po.policy}, p); err != nil {
		t.Fatal(err)
	}
	orig := p.DeepCopy()
	start := metav1.NewTime(time.Now().Add(-time.Second))
	p.Spec.Schedules = []v1alpha1.Schedule{{Name: "sale", Start: &start, Duration: metav1.Duration{Duration: time.Hour},
		Keys: []string{key}, Mitigation: v1alpha1.ScheduledMitigation{Split: &v1alpha1.ScheduledSplit{Shards: 4}}}}
	if err := cl.Patch(ctx, p, crclient.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}
