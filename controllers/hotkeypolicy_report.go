package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
)

// DefaultReportInterval is the least time between two writes of a policy's
// aggregated HotKeyReport. The report is for people; the manager decides on
// the hub's view, so its write rate can be bounded per policy, whatever the
// number of nodes.
const DefaultReportInterval = 10 * time.Second

// reportState is a policy's last written report.
type reportState struct {
	at    time.Time
	nodes int32
	cands []v1alpha1.Candidate
	big   []v1alpha1.BigKey
}

// reportCandidates picks the keys a report shows: those at or above half
// of the warm band (threshold × (1 − hysteresis) ÷ 2) in either direction,
// hottest first (rate relative to threshold), at most limit.
func reportCandidates(snap hub.Snapshot, th hub.Thresholds, limit int) []v1alpha1.Candidate {
	heat := func(e hub.Estimate) float64 {
		v := e.Upper
		if e.Exact {
			v = e.Lower
		}
		return max(v.Reads/float64(max(th.Reads, 1)), v.Writes/float64(max(th.Writes, 1)))
	}
	type kv struct {
		key  string
		e    hub.Estimate
		heat float64
	}
	var ks []kv
	for k, e := range snap.Estimates {
		if h := heat(e); h >= (1-th.Hysteresis)/2 {
			ks = append(ks, kv{k, e, h})
		}
	}
	slices.SortFunc(ks, func(a, b kv) int {
		if c := cmp.Compare(b.heat, a.heat); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	ks = ks[:min(len(ks), limit)]
	out := make([]v1alpha1.Candidate, len(ks))
	for i, k := range ks {
		v := k.e.Upper
		if k.e.Exact {
			v = k.e.Lower
		}
		out[i] = v1alpha1.Candidate{Key: k.key, ReadsPerSecond: round(v.Reads), WritesPerSecond: round(v.Writes),
			BytesPerSecond: round(k.e.Bytes), Exact: k.e.Exact}
	}
	return out
}

// reportDue says whether the report should be written at now: never within
// interval of the last write, and then only when what it would say changed
// materially (see materialChange), the number of nodes changed by more
// than a tenth, or it was never written.
func reportDue(now time.Time, last reportState, nodes int32, cands []v1alpha1.Candidate, th hub.Thresholds, interval time.Duration) bool {
	if last.at.IsZero() {
		return true
	}
	if now.Sub(last.at) < interval {
		return false
	}
	return materialChange(last.cands, cands, th) || moved(int64(last.nodes), int64(nodes), 0.1)
}

// materialChange reports whether the candidates differ materially for a
// key in the warm band (counted exactly at or over threshold × (1 −
// hysteresis)) before or after: it came or went, or a rate moved by more
// than a fifth and by more than a twentieth of its threshold. Background keys
// under the warm band move with the traffic's noise, and a key whose upper
// bound alone reaches the band is pinned and counted exactly within a
// second or so (then it is warm or it is not); both are shown as they are at
// the next material change, not worth a write of their own.
func materialChange(old, new []v1alpha1.Candidate, th hub.Thresholds) bool {
	warm := func(c v1alpha1.Candidate) bool {
		return c.Exact && (float64(c.ReadsPerSecond) >= float64(th.Reads)*(1-th.Hysteresis) ||
			float64(c.WritesPerSecond) >= float64(th.Writes)*(1-th.Hysteresis))
	}
	prev := make(map[string]v1alpha1.Candidate, len(old))
	for _, c := range old {
		prev[c.Key] = c
	}
	for _, c := range new {
		p, ok := prev[c.Key]
		delete(prev, c.Key)
		switch {
		case !ok:
			if warm(c) {
				return true
			}
		case warm(p) || warm(c):
			if rateMoved(p.ReadsPerSecond, c.ReadsPerSecond, th.Reads) || rateMoved(p.WritesPerSecond, c.WritesPerSecond, th.Writes) || warm(p) != warm(c) {
				return true
			}
		}
	}
	for _, c := range prev { // gone
		if warm(c) {
			return true
		}
	}
	return false
}

func moved(a, b int64, frac float64) bool {
	return math.Abs(float64(a-b)) > frac*float64(max(a, 1))
}

func round(f float64) int64 {
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(math.Round(f))
}

// writeReport writes the policy's aggregated HotKeyReport when it is due. A
// failure is logged and retried at the next pass: the report is for people
// and nothing depends on it.
func (r *HotKeyPolicyReconciler) writeReport(ctx context.Context, p *pass) {
	// The thresholds the hub counts with (the least in force on any shard).
	th := hub.ParamsFromSpec(p.spec).Thresholds
	th.Reads, th.Writes = p.detect[0], p.detect[1]
	cands := reportCandidates(p.hubSnap, th, int(p.spec.Detection.TopK))
	annotateCandidates(cands, p.hubSnap, &p.out)
	nodes := int32(p.hubSnap.FreshNodes)
	so := r.sizeOptions()
	big := reportBigKeys(p.hubSnap.BigKeys, p.spec.Thresholds.ValueBytes, r.measuredSizes(p, so), p.now, so.TTL)
	r.confirmSizes(ctx, p, big, so)
	r.noteSizes(ctx, p)
	// From here on the keys are what people read: shown by p.names (the
	// report, the big-key Events, and the memory compared with them).
	cands, big = namedCandidates(cands, p.names), namedBigKeys(big, p.names)
	r.noteBigKeys(p, big)
	var last reportState
	r.mem.with(p.key, func(m *policyMemory) { last = m.report })
	interval := cmp.Or(r.ReportInterval, DefaultReportInterval)
	if !reportDue(p.now, last, nodes, cands, th, interval) {
		if !bigKeysChanged(last.big, big) {
			return
		}
		if p.now.Sub(last.at) < interval {
			// Sizes confirmed in the background change nothing else: come
			// back when the report may be written.
			p.reportAt = last.at.Add(interval)
			return
		}
	}
	rep := &v1alpha1.HotKeyReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.policy.Namespace, Name: p.policy.Name,
			Labels: map[string]string{v1alpha1.LabelPolicy: p.policy.Name}},
		Spec: v1alpha1.HotKeyReportSpec{
			PolicyName: p.policy.Name, Window: p.spec.Detection.Window, GeneratedAt: metav1.NewTime(p.now),
			Nodes: nodes, UnseenReadsPerSecond: round(p.hubSnap.Unseen.Reads), UnseenWritesPerSecond: round(p.hubSnap.Unseen.Writes),
			Candidates: cands, BigKeys: big,
		},
	}
	if err := r.upsertReport(ctx, p.policy, rep); err != nil {
		log.FromContext(ctx).Error(err, "writing the aggregated report")
		return
	}
	r.mem.with(p.key, func(m *policyMemory) { m.report = reportState{at: p.now, nodes: nodes, cands: cands, big: big} })
}

// upsertReport creates the report, owned by the policy (so it goes with
// it), or replaces its spec with a merge patch: the manager is its only
// writer, so no resourceVersion is needed.
func (r *HotKeyPolicyReconciler) upsertReport(ctx context.Context, policy *v1alpha1.HotKeyPolicy, rep *v1alpha1.HotKeyReport) error {
	spec := rep.Spec
	if spec.Candidates == nil {
		spec.Candidates = []v1alpha1.Candidate{} // "[]": the patch must clear the list
	}
	if spec.BigKeys == nil {
		spec.BigKeys = []v1alpha1.BigKey{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": rep.Labels}, "spec": spec})
	if err != nil {
		return err
	}
	err = r.Client.Patch(ctx, rep.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		if err = controllerutil.SetControllerReference(policy, rep, r.Scheme); err != nil {
			return err
		}
		err = r.Client.Create(ctx, rep)
	}
	return err
}
