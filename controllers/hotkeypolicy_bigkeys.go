package controllers

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/sizes"
)

// ReasonBigKeys is the Warning Event raised when a key's size reaches the
// policy's thresholds.valueBytes.
const ReasonBigKeys = "BigKeys"

// ReasonBigKeysUnconfirmed is the Warning Event raised when MEMORY USAGE
// starts failing for a policy (refused by the ACL, Redis unreachable): its
// big keys are then listed by their observed value sizes only.
const ReasonBigKeysUnconfirmed = "BigKeysUnconfirmed"

// reportBigKeys is what the report lists by size: the hub's big keys, with
// the sizes MEMORY USAGE confirmed (measured, fresh within ttl), largest
// first by size (memoryBytes once confirmed, else valueBytes; a key found
// missing last), each marked Big at or over threshold.
func reportBigKeys(big []agentlink.KeySize, threshold int64, measured map[string]sizes.Result, now time.Time, ttl time.Duration) []v1alpha1.BigKey {
	if len(big) == 0 {
		return nil
	}
	out := make([]v1alpha1.BigKey, len(big))
	for i, k := range big {
		bk := v1alpha1.BigKey{Key: k.Key, ValueBytes: int64(min(k.Bytes, 1<<62))}
		if m, ok := sizes.Fresh(measured, k.Key, now, ttl); ok {
			bk.MemoryBytes, bk.Missing = m.Bytes, m.Missing
		}
		bk.Big = threshold > 0 && !bk.Missing && bigKeySize(bk) >= threshold
		out[i] = bk
	}
	// Stable: equal sizes keep the hub's order (largest observed first).
	slices.SortStableFunc(out, func(a, b v1alpha1.BigKey) int {
		return cmp.Or(cmp.Compare(btoi(a.Missing), btoi(b.Missing)), cmp.Compare(bigKeySize(b), bigKeySize(a)))
	})
	return out
}

// bigKeySize is a listed key's size: what MEMORY USAGE confirmed, else the
// largest value an access saw. A confirmed size replaces the observed one
// both ways: a hash read a field at a time is larger in Redis than any
// reply, a value since overwritten by a small one is smaller.
func bigKeySize(k v1alpha1.BigKey) int64 {
	if k.MemoryBytes > 0 || k.Missing {
		return k.MemoryBytes
	}
	return k.ValueBytes
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// bigKeysChanged reports whether the report's big keys differ enough to be
// written again: a key came or went, crossed the threshold, was found
// missing, or its size moved by more than a tenth.
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
		if !ok || p.Big != k.Big || p.Missing != k.Missing || moved(p.ValueBytes, k.ValueBytes, 0.1) || moved(p.MemoryBytes, k.MemoryBytes, 0.1) {
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
		fmt.Fprintf(&b, " %q (%d bytes)", k.Key, bigKeySize(k))
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
