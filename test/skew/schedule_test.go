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
// a one-off event, replicated into warmReplicas copies. From the
// pre-warm (start - leadTime) the table holds the key bounded to the
// event (notBefore start, notAfter end) and the manager fills the copies,
// so that every sidecar holds the move when the event starts and applies
// it from its first read (docs/manager.md, Schedules and pre-warm). The
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
	// inFlight is how long after the event's start or end a GET the
	// sidecar began before it may still reach Redis.
	inFlight = 100 * time.Millisecond
)

// warmEvent is one node's scheduled event.
type warmEvent struct {
	key        string
	start, end time.Time
}

// newWarmEvent is key's event, timed from now, the policy's creation. The
// start is whole seconds, as the API server keeps it (RFC 3339).
func newWarmEvent(key string, now time.Time) warmEvent {
	start := now.Add(warmLead + warmLeadTime).Truncate(time.Second)
	return warmEvent{key: key, start: start, end: start.Add(warmDuration)}
}

// schedule is the policy's spec.schedules entry of the event.
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

// check follows the event against the wall clock that the manager and
// the sidecar read too (one machine). Before the start: the table holds
// the key's copies, published no earlier than the pre-warm; the sidecar
// obeys that table or a later one (its heatsink_proxy_routing_version);
// the manager has filled every copy with the value; and the sidecar has
// not read a copy (the move waits for the start). From the start the
// sidecar reads the copies (GETs of them on Redis, which only a sidecar
// following the move sends: the client reads the key's own name, the
// manager writes the copies). From the end it reads the base key alone
// (20 client GETs without a GET of a copy), and the table drops the key.
// It runs beside the node's other checks, so it returns its failure
// instead of failing the test; addr is the master's address, metrics the
// sidecar's, gets counts the client's GETs of the key.
func (w warmEvent) check(ctx context.Context, cp *controlplane.ControlPlane, direct *redis.Client, addr, metrics, policy string, gets func() int64, logf func(string, ...any)) error {
	copies := routing.ReplicaKeys(w.key, warmReplicas)
	copyGets, err := newMonitor(addr, copies...)
	if err != nil {
		return err
	}
	defer copyGets.stop()
	prewarm := w.start.Add(-warmLeadTime)
	beforeStart := func(what string) error {
		if !time.Now().Before(w.start) {
			return eventually.Permanent(fmt.Errorf("%s: the event of %s has started", what, w.key))
		}
		return nil
	}
	var version int64
	if err := eventually.Poll(ctx, time.Until(w.start), func() error {
		tbl, e, err := tableEntry(cp, policy, w.key)
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
		version = tbl.Version
		return nil
	}); err != nil {
		return fmt.Errorf("scheduled pre-warm of %s before its start: %w", w.key, err)
	}
	if err := eventually.Poll(ctx, time.Until(w.start), func() error {
		v, err := routingVersion(metrics)
		if err != nil {
			return err
		}
		if v < version {
			return fmt.Errorf("the sidecar obeys table version %d, the pre-warm's is %d", v, version)
		}
		return beforeStart("the sidecar holds the pre-warm's table")
	}); err != nil {
		return fmt.Errorf("scheduled pre-warm of %s: %w", w.key, err)
	}
	if err := eventually.Poll(ctx, time.Until(w.start), func() error {
		// MGET: the copies' GETs are the sidecar's alone.
		vs, err := direct.MGet(ctx, copies...).Result()
		if err != nil {
			return err
		}
		for i, v := range vs {
			if v != "w" {
				return fmt.Errorf("copy %s of %s holds %v, want the value", copies[i], w.key, v)
			}
		}
		return beforeStart("the copies are filled")
	}); err != nil {
		return fmt.Errorf("scheduled pre-warm of %s: %w", w.key, err)
	}
	logf("%s: the sidecar holds the pre-warm's table and the copies are filled %v after the pre-warm began, %v before the event's start", w.key, time.Since(prewarm).Round(time.Millisecond), time.Until(w.start).Round(time.Millisecond))
	if err := eventually.Poll(ctx, time.Until(w.start)+5*time.Second, func() error {
		// The count first: a read counted before a time before the
		// start was a read before it.
		n := copyGets.count()
		if time.Now().Before(w.start) {
			if n > 0 {
				return eventually.Permanent(fmt.Errorf("the sidecar read the copies of %s %d times before the event's start (%v), the last: %s", w.key, n, w.start.Format(time.RFC3339Nano), copyGets.lastLine()))
			}
			return errors.New("the event has not started")
		}
		if n == 0 {
			return fmt.Errorf("no copy of %s read since the event's start: the sidecar does not apply the scheduled replicate", w.key)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("scheduled event of %s: %w", w.key, err)
	}
	logf("%s: the sidecar reads its copies %v after the event's start", w.key, time.Since(w.start).Round(time.Millisecond))
	if err := eventually.Poll(ctx, time.Until(w.end)+inFlight+time.Second, func() error {
		if time.Now().Before(w.end.Add(inFlight)) {
			return errors.New("the event has not ended")
		}
		return nil
	}); err != nil {
		return err
	}
	c0, g0 := copyGets.count(), gets()
	if err := eventually.Poll(ctx, 10*time.Second, func() error {
		if gets()-g0 < 20 {
			return fmt.Errorf("%d GETs of %s", gets()-g0, w.key)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("after the scheduled event of %s: %w", w.key, err)
	}
	if c := copyGets.count() - c0; c > 0 {
		return fmt.Errorf("after the scheduled event of %s: the copies were read %d times in %d client GETs: the sidecar still applies the schedule", w.key, c, gets()-g0)
	}
	if err := eventually.Poll(ctx, 30*time.Second, func() error {
		_, e, err := tableEntry(cp, policy, w.key)
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
	return nil
}

// routingVersion is the sidecar's heatsink_proxy_routing_version, the
// version of the table it obeys.
func routingVersion(metrics string) (int64, error) {
	v, err := metricValue(metrics, "heatsink_proxy_routing_version")
	return int64(v), err
}
