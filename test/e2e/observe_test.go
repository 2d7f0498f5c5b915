//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/heatsink-dev/heatsink/demo/observe"
)

// newObserver watches the policy's routing ConfigMap for the rest of the
// test, with the demo's observer: when each key was first over a threshold
// (the manager's published state says when it first saw it so), first
// routed, and whether the table ever dropped it.
func newObserver(t *testing.T, ctx context.Context, ns, policy string) *observe.Observer {
	cfg, err := config.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	o, err := observe.NewObserver(cfg, ns, policy)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := o.Start(ctx); err != nil {
		t.Fatalf("observer: %v", err)
	}
	return o
}

// pick returns, for each of keys whose moment is set, that moment.
func pick(snap observe.Snapshot, moment func(observe.KeyTimes) time.Time, keys []string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, k := range keys {
		if v := moment(snap.Keys[k]); !v.IsZero() {
			out[k] = v
		}
	}
	return out
}

// routedAt returns when each of keys the routing table has listed was first
// listed.
func routedAt(snap observe.Snapshot, keys ...string) map[string]time.Time {
	return pick(snap, func(kt observe.KeyTimes) time.Time { return kt.Routed }, keys)
}

// detectedAt returns when each of keys the manager has seen over a threshold
// was first seen so.
func detectedAt(snap observe.Snapshot, keys ...string) map[string]time.Time {
	return pick(snap, func(kt observe.KeyTimes) time.Time { return kt.Detected }, keys)
}

// lostKeys are the keys a routing table ever dropped after listing them.
func lostKeys(snap observe.Snapshot) []string {
	lost := map[string]bool{}
	for k, kt := range snap.Keys {
		if !kt.Dropped.IsZero() {
			lost[k] = true
		}
	}
	return sortedKeys(lost)
}

// calm returns the start of the first run of n seconds whose busiest master
// is within limit× the mean, after the first second past from that was not.
func calm(smp []observe.Sample, from time.Time, limit float64, n int) (time.Time, bool) {
	run, hot := 0, false
	for i, x := range smp {
		if x.At.Before(from) {
			continue
		}
		if !hot {
			hot = x.Ratio() > limit
			continue
		}
		if x.Ratio() <= limit {
			run++
			if run == n {
				return smp[i-n+1].At, true
			}
		} else {
			run = 0
		}
	}
	return time.Time{}, false
}

// lastRatios formats the busiest ÷ mean of the last n samples.
func lastRatios(smp []observe.Sample, n int) []string {
	var out []string
	for _, x := range smp[max(0, len(smp)-n):] {
		out = append(out, fmt.Sprintf("%.2f", x.Ratio()))
	}
	return out
}

// ratios returns the mean and the peak busiest ÷ mean of the samples in
// [from, to); a zero to means to the end.
func ratios(smp []observe.Sample, from, to time.Time) (mean, peak float64) {
	n := 0
	for _, x := range smp {
		if x.At.Before(from) || (!to.IsZero() && !x.At.Before(to)) {
			continue
		}
		r := x.Ratio()
		mean += r
		peak = max(peak, r)
		n++
	}
	if n == 0 {
		return 0, 0
	}
	return mean / float64(n), peak
}
