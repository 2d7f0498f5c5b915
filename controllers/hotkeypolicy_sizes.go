package controllers

import (
	"cmp"
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/sizes"
)

// policySizes is what MEMORY USAGE told of a policy's big keys, kept in
// policyMemory (a new leader measures afresh).
type policySizes struct {
	// bucket bounds the calls: sizes.Options.PerInterval keys a report
	// interval, failed or not.
	bucket sizes.Bucket
	// results are the answers, each standing for sizes.Options.TTL.
	results map[string]sizes.Result
	// inFlight: a measure runs; no second one starts.
	inFlight bool
	// err is the last measure's error ("" once one succeeds); errShown is
	// the one an Event was raised for, so a lasting refusal raises one.
	err, errShown string
}

// sizeOptions are r.Sizes with the bucket refilled every report interval
// unless set.
func (r *HotKeyPolicyReconciler) sizeOptions() sizes.Options {
	o := r.Sizes
	o.Interval = cmp.Or(o.Interval, r.ReportInterval, DefaultReportInterval)
	return o.WithDefaults()
}

// measuredSizes drops the stale answers and returns the fresh ones.
func (r *HotKeyPolicyReconciler) measuredSizes(p *pass, o sizes.Options) map[string]sizes.Result {
	var out map[string]sizes.Result
	r.mem.with(p.key, func(m *policyMemory) {
		sizes.Expire(m.sizes.results, p.now, o.TTL)
		out = maps.Clone(m.sizes.results)
	})
	return out
}

// confirmSizes starts measuring the listed keys that have no fresh answer,
// largest first, as many as the bucket grants, in the background (like the
// capacity sample: a slow Redis never holds the pass); the answers show in
// the report of a later pass, which the measure asks for when done. When
// keys wait for tokens, p.sizesAt is when a batch of them is there.
func (r *HotKeyPolicyReconciler) confirmSizes(ctx context.Context, p *pass, big []v1alpha1.BigKey, o sizes.Options) {
	keys := make([]string, len(big))
	for i, k := range big {
		keys[i] = k.Key
	}
	var (
		due []string
		pm  *policyMemory
	)
	r.mem.with(p.key, func(m *policyMemory) {
		s := &m.sizes
		if s.inFlight {
			return
		}
		want := sizes.Due(keys, s.results, p.now, o.TTL, o.PerInterval)
		if len(want) == 0 {
			return
		}
		n := s.bucket.Take(p.now, len(want), o)
		if n > 0 {
			due, pm, s.inFlight = want[:n], m, true
		}
		if n < len(want) {
			// Come back for a whole batch, not for every token: about one
			// pass a report interval while keys wait.
			p.sizesAt = s.bucket.Next(p.now, len(want)-n, o)
		}
	})
	if len(due) == 0 {
		return
	}
	cl, _, err := r.capacityClient(ctx, p.policy)
	if err != nil {
		// The pass shows why there is no client (credentials, TLS); the
		// tokens are spent, so this retries at the bucket's rate.
		r.mem.mu.Lock()
		pm.sizes.inFlight = false
		r.mem.mu.Unlock()
		return
	}
	now, key := p.now, p.key
	go func() {
		mctx, cancel := context.WithTimeout(context.Background(), sampleTimeout)
		defer cancel()
		got, err := sizes.Measure(mctx, cl, due, o.Samples, now)
		// pm, not mem.with: a policy forgotten meanwhile is not recreated.
		r.mem.mu.Lock()
		s := &pm.sizes
		s.inFlight = false
		if s.results == nil {
			s.results = map[string]sizes.Result{}
		}
		maps.Copy(s.results, got)
		s.err = ""
		if err != nil {
			s.err = err.Error()
		}
		r.mem.mu.Unlock()
		r.trigger(key)
	}()
}

// noteSizes raises a Warning Event when measuring starts failing or fails
// otherwise than before, and logs it; nothing else depends on it.
func (r *HotKeyPolicyReconciler) noteSizes(ctx context.Context, p *pass) {
	var msg string
	r.mem.with(p.key, func(m *policyMemory) {
		if s := &m.sizes; s.err != s.errShown {
			msg, s.errShown = s.err, s.err
		}
	})
	if msg == "" {
		return
	}
	log.FromContext(ctx).Info("big keys unconfirmed: MEMORY USAGE failed", "error", msg)
	if r.Recorder != nil {
		r.Recorder.Eventf(p.policy, nil, corev1.EventTypeWarning, ReasonBigKeysUnconfirmed, "Observe",
			"big keys are listed by their observed value size: %s (the manager's Redis user needs +memory|usage; docs/proxy.md)", msg)
	}
}

// trigger asks for a pass of the policy key, if the queue has room (a pass
// comes anyway at its next requeue).
func (r *HotKeyPolicyReconciler) trigger(key types.NamespacedName) {
	p := &v1alpha1.HotKeyPolicy{}
	p.Namespace, p.Name = key.Namespace, key.Name
	select {
	case r.triggers <- event.GenericEvent{Object: p}:
	default:
	}
}
