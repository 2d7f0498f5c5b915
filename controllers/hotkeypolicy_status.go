package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/routing"
)

// ReasonInvalidSchedule: a schedule cannot be evaluated (bad cron or time
// zone that slipped past admission); the other schedules still apply.
const ReasonInvalidSchedule = "InvalidSchedule"

// maxStatusHotKeys is the schema's cap on status.hotKeys.
const maxStatusHotKeys = 50

// maxStatusEvents is the schema's cap on status.nextEvents.
const maxStatusEvents = 32

// buildStatus computes the next status from what the pass found and did:
// the counts and lists it shows, then each condition by its own setter, as
// Cluster API's controllers do (one pure function per condition, tested
// alone). Conditions keep their lastTransitionTime unless their status
// changes.
func buildStatus(p *pass) *v1alpha1.HotKeyPolicyStatus {
	st := p.policy.Status.DeepCopy()
	st.ObservedGeneration = p.policy.Generation
	// The epoch matters only to split keys; following the clock while
	// nothing is split would rewrite the status every epoch for nothing.
	if hasSplit(p.enforced) || st.Epoch == 0 {
		st.Epoch = routing.EpochAt(p.now, p.spec.Mitigations.Split.Epoch.Milliseconds())
	}
	st.RoutingConfigMap = routingName(p.policy)
	st.RoutingVersion = max(st.RoutingVersion, p.pub.version)
	st.ReportingNodes, st.StaleNodes = shownNodes(st.ReportingNodes, st.StaleNodes, int32(p.agg.FreshNodes), int32(p.agg.StaleNodes))
	st.HotKeyCount = int32(len(p.out.Keys))
	st.ShedKeyCount = int32(shedKeys(&p.out))
	st.Moves = moves(p.out.Keys)
	st.HotKeys = shownHotKeys(st.HotKeys, slices.Concat(p.out.Keys, p.out.Refrained), p.ratesDue, p.detect, p.names)
	st.NextEvents = nextEvents(p.evs)
	if p.sidecarsListed {
		st.SidecarVersions = p.sidecars
	}
	if p.ratesDue || len(st.Shards) != len(p.shards) {
		st.Shards, st.BusiestShardUtilizationPercent = shardStatus(p.shards, p.shardThresholds())
	}

	gen := p.policy.Generation
	setReadyCondition(st, gen, p.spec.Mode, p.pub)
	setMitigatingCondition(st, gen, p.spec.Mode, &p.out)
	setDegradedCondition(st, gen, p.act, p.schedErrs)
	clearTargetAllowedCondition(st)
	setKstatusConditions(st, gen, p.pub.draining)
	return st
}

// shownHotKeys are the hot keys status shows: the first maxStatusHotKeys of
// keys (the mitigated ones hottest first, then those no allowed move
// serves, each with its command families and why a move was left out), in the order of their names (by heat, two keys at
// about the same heat would swap places from pass to pass, and each swap
// would be a status write). A key already shown in old keeps its shown
// rates unless ratesDue and they moved (rateMoved): rates are shown, not
// decided on, so the status changes when something did, not at every step
// of a key's rise or decay. Keys are shown by names (keynames).
func shownHotKeys(old []v1alpha1.HotKeyStatus, keys []decide.KeyDecision, ratesDue bool, th [2]int64, names *keynames.Namer) []v1alpha1.HotKeyStatus {
	shown := make(map[string]v1alpha1.HotKeyStatus, len(old))
	for _, hk := range old {
		shown[hk.Key] = hk
	}
	var out []v1alpha1.HotKeyStatus
	for _, k := range keys[:min(len(keys), maxStatusHotKeys)] {
		hk := v1alpha1.HotKeyStatus{Key: names.Name(k.Key), ReadsPerSecond: k.ReadsPerSecond, WritesPerSecond: k.WritesPerSecond,
			Mitigations: k.Mitigations, Shards: k.Shards, Replicas: k.Replicas, Source: k.Source,
			ShedReadsPerSecond: k.ShedReads, ShedWritesPerSecond: k.ShedWrites,
			Families: k.Families.Names(), Reason: truncate(k.Reason)}
		if o, ok := shown[hk.Key]; ok && (!ratesDue ||
			!rateMoved(o.ReadsPerSecond, hk.ReadsPerSecond, th[0]) && !rateMoved(o.WritesPerSecond, hk.WritesPerSecond, th[1])) {
			hk.ReadsPerSecond, hk.WritesPerSecond = o.ReadsPerSecond, o.WritesPerSecond
		}
		if k.Since != nil {
			t := metav1.NewTime(k.Since.UTC().Truncate(time.Second))
			hk.Since = &t
		}
		out = append(out, hk)
	}
	slices.SortFunc(out, func(a, b v1alpha1.HotKeyStatus) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// nextEvents are the first maxStatusEvents schedule events status lists.
func nextEvents(evs []schedule.Event) []v1alpha1.ScheduledEventStatus {
	var out []v1alpha1.ScheduledEventStatus
	for _, ev := range evs[:min(len(evs), maxStatusEvents)] {
		out = append(out, v1alpha1.ScheduledEventStatus{Name: ev.Name,
			Start: metav1.NewTime(ev.Start), End: metav1.NewTime(ev.End), PrewarmAt: metav1.NewTime(ev.PrewarmAt)})
	}
	return out
}

// setCondition sets one condition of st, observed at generation gen.
func setCondition(st *v1alpha1.HotKeyPolicyStatus, gen int64, typ string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// setReadyCondition: False when the routing ConfigMap could not be
// published; in Observe mode True/Observing (saying which splits from
// before the switch still drain); otherwise True/Published with the
// version in force (st.RoutingVersion).
func setReadyCondition(st *v1alpha1.HotKeyPolicyStatus, gen int64, mode v1alpha1.PolicyMode, pub publishResult) {
	switch {
	case errors.Is(pub.err, errRoutingNotOwned):
		setCondition(st, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonRoutingNotOwned, pub.err.Error())
	case pub.err != nil:
		setCondition(st, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPublishFailed, pub.err.Error())
	case mode != v1alpha1.ModeEnforce && pub.draining > 0:
		setCondition(st, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonObserving, fmt.Sprintf(
			"decisions are computed and shown in status; %d keys split before the switch to Observe stay published until unsplit and folded", pub.draining))
	case mode != v1alpha1.ModeEnforce:
		setCondition(st, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonObserving, "decisions are computed and shown in status; nothing is published")
	default:
		setCondition(st, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, fmt.Sprintf("routing table version %d published", st.RoutingVersion))
	}
}

// setMitigatingCondition: True while the decision mitigates a key (counting
// those the cap left out), False otherwise. A decision that sheds is
// KeysShed, a Warning (clients are being refused), except in Observe mode:
// nothing is published, so nothing is refused, and the reason is
// KeysWouldShed (a Normal Event), saying what Enforce would do.
func setMitigatingCondition(st *v1alpha1.HotKeyPolicyStatus, gen int64, mode v1alpha1.PolicyMode, out *decide.Output) {
	if len(out.Keys) == 0 {
		setCondition(st, gen, v1alpha1.ConditionMitigating, metav1.ConditionFalse, v1alpha1.ReasonNoHotKeys, "no key is mitigated")
		return
	}
	msg := fmt.Sprintf("%d keys mitigated", len(out.Keys))
	if out.Capped > 0 {
		msg += fmt.Sprintf("; %d more left out by capacity.maxMitigatedKeys", out.Capped)
	}
	reason := v1alpha1.ReasonHotKeys
	switch n := shedKeys(out); {
	case n > 0 && mode != v1alpha1.ModeEnforce:
		reason = v1alpha1.ReasonWouldShed
		msg += fmt.Sprintf("; %d would be shed over their budget (Observe mode: nothing is refused)", n)
	case n > 0:
		// The change to this reason is a Warning Event (transitions):
		// clients are being refused.
		reason = v1alpha1.ReasonShedding
		msg += fmt.Sprintf("; %d shed over their budget (the excess is refused with SHED)", n)
	}
	setCondition(st, gen, v1alpha1.ConditionMitigating, metav1.ConditionTrue, reason, msg)
}

// setDegradedCondition says the worst that is wrong, first of: the pass's
// Redis work failed, a schedule cannot be evaluated, nodes hosting the
// policy's pods are stale (st's shown counts: shownNodes shows a stale
// count going to or from zero at once). False when nothing is.
func setDegradedCondition(st *v1alpha1.HotKeyPolicyStatus, gen int64, act actResult, schedErrs []error) {
	switch {
	case act.reason != "":
		setCondition(st, gen, v1alpha1.ConditionDegraded, metav1.ConditionTrue, act.reason, truncate(act.message))
	case len(schedErrs) > 0:
		setCondition(st, gen, v1alpha1.ConditionDegraded, metav1.ConditionTrue, ReasonInvalidSchedule, truncate(errors.Join(schedErrs...).Error()))
	case st.StaleNodes > 0:
		setCondition(st, gen, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonStaleReports,
			fmt.Sprintf("%d of %d nodes hosting the policy's pods sent no summary for %d report intervals; their traffic is not counted",
				st.StaleNodes, st.StaleNodes+st.ReportingNodes, hub.StaleAfterIntervals))
	default:
		setCondition(st, gen, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, "nothing is degraded")
	}
}

// rateMoved says whether a shown rate should change from old to new: by
// more than a fifth and by more than a twentieth of its threshold.
func rateMoved(old, new, threshold int64) bool {
	return moved(old, new, 0.2) && float64(max(old-new, new-old)) > 0.05*float64(threshold)
}

// ratesRefreshed reports whether a key shown in both old and next shows
// another rate in next (a refresh, which waits for ratesDue).
func ratesRefreshed(old, next []v1alpha1.HotKeyStatus) bool {
	shown := make(map[string]v1alpha1.HotKeyStatus, len(old))
	for _, hk := range old {
		shown[hk.Key] = hk
	}
	for _, hk := range next {
		if o, ok := shown[hk.Key]; ok && (o.ReadsPerSecond != hk.ReadsPerSecond || o.WritesPerSecond != hk.WritesPerSecond) {
			return true
		}
	}
	return false
}

// shownNodes are the node counts status shows, given the shown ones and the
// pass's. They are shown, not decided on: at 1,000 nodes one node more or
// less must not be a status write. A count changes when it moves by more
// than a tenth of the nodes, and whenever the stale count goes to or from
// zero (Degraded follows it).
func shownNodes(oldFresh, oldStale, fresh, stale int32) (int32, int32) {
	total := int64(max(fresh+stale, oldFresh+oldStale, 1))
	changed := func(a, b int32) bool { return 10*int64(max(a-b, b-a)) >= total }
	if (oldStale == 0) != (stale == 0) || (oldFresh == 0) != (fresh == 0) || changed(oldFresh, fresh) || changed(oldStale, stale) {
		return fresh, stale
	}
	return oldFresh, oldStale
}

// shedKeys counts the keys a decision sheds.
func shedKeys(out *decide.Output) int {
	n := 0
	for _, e := range out.Entries {
		if e.Shed != nil {
			n++
		}
	}
	return n
}

// moves counts the keys each mitigation is applied to, in the order of
// v1alpha1.MitigationOrder ("Coalesce=3,LocalCache=3,Shed=1"; "" for none), for
// status.moves and its kubectl column: which moves the policy makes, over
// every key, where hotKeys shows the first 50.
func moves(keys []decide.KeyDecision) string {
	n := make(map[v1alpha1.MitigationType]int, len(v1alpha1.MitigationOrder))
	for _, k := range keys {
		for _, m := range k.Mitigations {
			n[m]++
		}
	}
	var b strings.Builder
	for _, m := range v1alpha1.MitigationOrder {
		if n[m] > 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%d", m, n[m])
		}
	}
	return b.String()
}

// hasSplit reports whether a table has a split key.
func hasSplit(out *decide.Output) bool {
	if out == nil {
		return false
	}
	for _, e := range out.Entries {
		if e.Split != nil {
			return true
		}
	}
	return false
}

func truncate(s string) string {
	if len(s) > 1024 {
		return s[:1024]
	}
	return s
}

// transition is one Event a condition change is worth.
type transition struct {
	eventType, reason, action, message string
}

// transitions lists one Event per condition of next whose status or reason
// differs from old (a new message alone is no transition, so a pass that
// only updates a count emits nothing): the condition's reason as the
// Event's reason and its type as the action, Warning when it turned bad
// (Degraded True, Ready False). A condition that first appears False is not
// news.
func transitions(old, next []metav1.Condition) []transition {
	var out []transition
	for _, c := range next {
		prev := meta.FindStatusCondition(old, c.Type)
		if prev != nil && prev.Status == c.Status && prev.Reason == c.Reason {
			continue
		}
		if prev == nil && c.Status == metav1.ConditionFalse {
			continue // a first "nothing wrong" is not news
		}
		if c.Type == v1alpha1.ConditionReconciling || c.Type == v1alpha1.ConditionStalled {
			continue // derived from Ready and Degraded, whose Events tell the news
		}
		typ := corev1.EventTypeNormal
		if (c.Type == v1alpha1.ConditionDegraded && c.Status == metav1.ConditionTrue) || (c.Type == v1alpha1.ConditionReady && c.Status == metav1.ConditionFalse) || c.Reason == v1alpha1.ReasonShedding {
			typ = corev1.EventTypeWarning
		}
		out = append(out, transition{eventType: typ, reason: c.Reason, action: c.Type, message: c.Message})
	}
	return out
}

// recordTransitions emits the Events of the condition changes from old to
// next (see transitions).
func (r *HotKeyPolicyReconciler) recordTransitions(policy *v1alpha1.HotKeyPolicy, old, next *v1alpha1.HotKeyPolicyStatus) {
	if r.Recorder == nil {
		return
	}
	for _, t := range transitions(old.Conditions, next.Conditions) {
		r.Recorder.Eventf(policy, nil, t.eventType, t.reason, t.action, "%s", t.message)
	}
}

// ratesDue says whether a pass at now may refresh the rates status shows:
// a report interval or more since it last did.
func (r *HotKeyPolicyReconciler) ratesDue(key types.NamespacedName, now time.Time) bool {
	var shown time.Time
	r.mem.with(key, func(m *policyMemory) { shown = m.ratesShown })
	return !now.Before(shown.Add(cmp.Or(r.ReportInterval, DefaultReportInterval)))
}

// writeStatus patches the status, only when it changed, and remembers what
// it wrote (see caughtUp) and when it refreshed the shown rates (ratesDue).
func (r *HotKeyPolicyReconciler) writeStatus(ctx context.Context, policy *v1alpha1.HotKeyPolicy, st *v1alpha1.HotKeyPolicyStatus, now time.Time) error {
	if equality.Semantic.DeepEqual(&policy.Status, st) {
		return nil
	}
	refreshed := ratesRefreshed(policy.Status.HotKeys, st.HotKeys)
	base := policy.DeepCopy()
	policy.Status = *st
	if err := r.Client.Status().Patch(ctx, policy, client.MergeFrom(base)); err != nil {
		return err
	}
	r.mem.with(client.ObjectKeyFromObject(policy), func(m *policyMemory) {
		m.written = writtenStatus{baseRV: base.ResourceVersion, status: st.DeepCopy()}
		if refreshed {
			m.ratesShown = now
		}
	})
	return nil
}

// writtenStatus is a status the manager wrote, and the resourceVersion of
// the policy it was computed from.
type writtenStatus struct {
	baseRV string
	status *v1alpha1.HotKeyPolicyStatus
}

// caughtUp gives policy, read from the cache, the status the last pass
// wrote if the cache still serves the version that pass started from: a
// pass that follows at once (the hub's trigger, a requeue) would otherwise
// compare with the status before that write, and write it again and emit
// its Events again.
func (r *HotKeyPolicyReconciler) caughtUp(policy *v1alpha1.HotKeyPolicy) {
	var w writtenStatus
	r.mem.with(client.ObjectKeyFromObject(policy), func(m *policyMemory) { w = m.written })
	if w.status != nil && w.baseRV != "" && w.baseRV == policy.ResourceVersion {
		policy.Status = *w.status.DeepCopy()
	}
}
