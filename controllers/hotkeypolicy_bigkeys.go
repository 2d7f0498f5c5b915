package controllers

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// ReasonBigKeys is the Warning Event raised when a key's value reaches the
// policy's thresholds.valueBytes.
const ReasonBigKeys = "BigKeys"

// reportBigKeys is what the report lists by size: the hub's big keys
// (largest first), each marked Big at or over threshold.
func reportBigKeys(big []agentlink.KeySize, threshold int64) []v1alpha1.BigKey {
	if len(big) == 0 {
		return nil
	}
	out := make([]v1alpha1.BigKey, len(big))
	for i, k := range big {
		b := int64(min(k.Bytes, 1<<62))
		out[i] = v1alpha1.BigKey{Key: k.Key, ValueBytes: b, Big: threshold > 0 && b >= threshold}
	}
	return out
}

// bigKeysChanged reports whether the report's big keys differ enough to be
// written again: a key came or went, crossed the threshold, or its size
// moved by more than a tenth.
func bigKeysChanged(old, new []v1alpha1.BigKey) bool {
	if len(old) != len(new) {
		return true
	}
	prev := make(map[string]v1alpha1.BigKey, len(old))
	for _, k := range old {
		prev[k.Key] = k
	}
	for _, k := range new {
		p, ok := prev[k.Key]
		if !ok || p.Big != k.Big || moved(p.ValueBytes, k.ValueBytes, 0.1) {
			return true
		}
	}
	return false
}

// newlyBig lists the keys of big at or over the threshold that were not in
// before, and returns the set of those over it now: an Event is raised for
// a key when it reaches the threshold, not at every pass while it stays.
func newlyBig(before map[string]bool, big []v1alpha1.BigKey) (fresh []v1alpha1.BigKey, now map[string]bool) {
	now = map[string]bool{}
	for _, k := range big {
		if !k.Big {
			continue
		}
		now[k.Key] = true
		if !before[k.Key] {
			fresh = append(fresh, k)
		}
	}
	return fresh, now
}

// bigKeysMessage is the Event's text: how many keys, and the first few.
func bigKeysMessage(fresh []v1alpha1.BigKey, threshold int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d key(s) reached thresholds.valueBytes (%d bytes):", len(fresh), threshold)
	for i, k := range fresh {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", len(fresh)-3)
			break
		}
		fmt.Fprintf(&b, " %q (%d bytes)", k.Key, k.ValueBytes)
	}
	b.WriteString("; see the policy's HotKeyReport bigKeys")
	return b.String()
}

// noteBigKeys sets the policy's big-key gauge and raises the Event for keys
// that newly reached the threshold.
func (r *HotKeyPolicyReconciler) noteBigKeys(p *pass, big []v1alpha1.BigKey) {
	var before map[string]bool
	r.mem.with(p.key, func(m *policyMemory) { before = m.bigOver })
	fresh, now := newlyBig(before, big)
	r.mem.with(p.key, func(m *policyMemory) { m.bigOver = now })
	r.Metrics.bigKeys.WithLabelValues(p.policy.Namespace, p.policy.Name).Set(float64(len(now)))
	if len(fresh) > 0 && r.Recorder != nil {
		r.Recorder.Eventf(p.policy, nil, corev1.EventTypeWarning, ReasonBigKeys, "Observe", "%s", bigKeysMessage(fresh, p.spec.Thresholds.ValueBytes))
	}
}
