package skew

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/routing"
)

// The scheduled pre-warm: each node's policy names its key warm:<node> in
// a one-off event, and the sidecar must read the key's copies (filled by
// the manager) before the event starts, and stop once it has ended. The
// key is read at warmEvery, far under readThreshold, so only the schedule
// can move it.
const (
	// warmLead is how long after the policy's creation the pre-warm
	// begins: the sidecar is up by then, so a move published at once (a
	// schedule read as already due) is seen and refused.
	warmLead = 3 * time.Second
	// warmLeadTime is the schedule's leadTime: the window before the
	// event's start in which the move must reach the sidecar, long enough
	// for a loaded machine (the manager's pass, the fill, the table's way
	// through the node agent).
	warmLeadTime = 8 * time.Second
	warmDuration = 9 * time.Second // longer than the lead time (the CRD's rule)
	warmReplicas = 2
	warmEvery    = 50 * time.Millisecond // 20 GETs/s
)

// warmEvent is one node's scheduled event.
type warmEvent struct {
	key        string
	start, end time.Time
}

// newWarmEvent is key's event, timed from now, the policy's creation.
func newWarmEvent(key string, now time.Time) warmEvent {
	start := now.Add(warmLead + warmLeadTime)
	return warmEvent{key: key, start: start, end: start.Add(warmDuration)}
}

// schedule is the policy's spec.schedules entry of the event: replicate
// the key into warmReplicas copies from leadTime before start to the
// event's end.
func (w warmEvent) schedule() v1alpha1.Schedule {
	return v1alpha1.Schedule{
		Name:       "warm",
		Start:      &metav1.Time{Time: w.start},
		Duration:   metav1.Duration{Duration: warmDuration},
		LeadTime:   metav1.Duration{Duration: warmLeadTime},
		Keys:       []string{w.key},
		Mitigation: v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: warmReplicas}},
	}
}

// check follows the event against the wall clock that the manager reads
// too (one machine): the table names the key's copies no earlier than
// its pre-warm, the sidecar reads them (OBJECT FREQ over a new key's 5
// plus the manager's two writes, as checkReplicated) before the start,
// and after the end the table drops the key and the sidecar reads its
// base key alone: a window of 20 client GETs leaves every copy's count
// unchanged. It runs beside the node's other checks, so it returns its
// failure instead of failing the test; gets counts the client's GETs of
// the key.
func (w warmEvent) check(ctx context.Context, cp *controlplane.ControlPlane, direct *redis.Client, policy string, gets func() int64, logf func(string, ...any)) error {
	copies := routing.ReplicaKeys(w.key, warmReplicas)
	prewarm := w.start.Add(-warmLeadTime)
	if err := eventually.Poll(ctx, time.Until(w.start), func() error {
		e, err := tableEntry(cp, policy, w.key)
		if err != nil {
			return eventually.Permanent(err)
		}
		if e == nil || e.Replicate == nil {
			return fmt.Errorf("the table does not replicate %s", w.key)
		}
		// A second of slack for the manager's pass that starts the
		// pre-warm at its time and the API server's view of it.
		if now := time.Now(); now.Before(prewarm.Add(-time.Second)) {
			return eventually.Permanent(fmt.Errorf("the table replicates %s %v before its pre-warm", w.key, prewarm.Sub(now)))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("scheduled pre-warm of %s before its start: %w", w.key, err)
	}
	if err := eventually.Poll(ctx, time.Until(w.start), func() error {
		for _, k := range copies {
			if f, err := direct.ObjectFreq(ctx, k).Result(); err == nil && f > 5+2 {
				return nil
			}
		}
		return fmt.Errorf("no copy of %s read: the sidecar does not apply the scheduled replicate", w.key)
	}); err != nil {
		return fmt.Errorf("scheduled pre-warm of %s, %v before its start: %w", w.key, warmLeadTime, err)
	}
	logf("%s: the sidecar reads its copies %v after the pre-warm began, %v before the event's start", w.key, time.Since(prewarm).Round(time.Millisecond), time.Until(w.start).Round(time.Millisecond))
	for _, k := range copies {
		if v, err := direct.Get(ctx, k).Result(); err != nil || v != "w" {
			return fmt.Errorf("copy %s of %s holds %q (%v), want the value", k, w.key, v, err)
		}
	}
	if err := eventually.Poll(ctx, time.Until(w.end)+30*time.Second, func() error {
		if time.Now().Before(w.end) {
			return errors.New("the event has not ended")
		}
		e, err := tableEntry(cp, policy, w.key)
		if err != nil {
			return eventually.Permanent(err)
		}
		if e != nil {
			return fmt.Errorf("the table still holds %s after the event's end", w.key)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := eventually.Poll(ctx, 30*time.Second, func() error {
		f0, g0 := copyFreqs(ctx, direct, copies), gets()
		if err := eventually.Poll(ctx, 10*time.Second, func() error {
			if gets()-g0 < 20 {
				return fmt.Errorf("%d GETs of %s", gets()-g0, w.key)
			}
			return nil
		}); err != nil {
			return err
		}
		if f := copyFreqs(ctx, direct, copies); f > f0 {
			return fmt.Errorf("the copies of %s were read %d times in %d client GETs after the event's end: the sidecar still applies the schedule", w.key, f-f0, gets()-g0)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("after the scheduled event of %s: %w", w.key, err)
	}
	logf("%s: the sidecar reads the base key alone %v after the event's end", w.key, time.Since(w.end).Round(time.Millisecond))
	return nil
}

// copyFreqs sums the copies' OBJECT FREQ (a copy gone counts 0: nothing
// reads it).
func copyFreqs(ctx context.Context, direct *redis.Client, copies []string) int64 {
	var sum int64
	for _, k := range copies {
		if f, err := direct.ObjectFreq(ctx, k).Result(); err == nil {
			sum += f
		}
	}
	return sum
}
