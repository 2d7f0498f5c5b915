package controllers

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
	"github.com/heatsink-dev/heatsink/routing"
)

// These are unit tests of the controller's own decisions: no API server, no
// Redis. A pass is plain data, so each case is a pass literal.

// statusNow is 5s into epoch 1000 of the one-minute epochs of statusPass.
var statusNow = routing.EpochStart(1000, 60000).Add(5 * time.Second)

// statusPass is a pass of policy ns/p (generation 4) in Enforce mode that
// published version 5 with three nodes reporting and nothing hot.
func statusPass(mut ...func(*pass)) *pass {
	policy := &v1alpha1.HotKeyPolicy{}
	policy.Namespace, policy.Name, policy.Generation = "ns", "p", 4
	spec := policy.Spec.DeepCopy()
	spec.Mode = v1alpha1.ModeEnforce
	spec.Mitigations.Split.Epoch = metav1.Duration{Duration: time.Minute}
	v1alpha1.SetDefaults(spec)
	p := &pass{policy: policy, spec: spec, now: statusNow, agg: decide.Aggregate{FreshNodes: 3}, pub: publishResult{version: 5}, ratesDue: true,
		detect: [2]int64{v1alpha1.FallbackReadsPerSecond, v1alpha1.FallbackWritesPerSecond}}
	for _, m := range mut {
		m(p)
	}
	return p
}

func cond(typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: 4}
}

var (
	published5 = cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, "routing table version 5 published")
	notHot     = cond(v1alpha1.ConditionMitigating, metav1.ConditionFalse, v1alpha1.ReasonNoHotKeys, "no key is mitigated")
	healthy    = cond(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, "nothing is degraded")
	reconciled = cond(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonReconciled, "the policy's last change is carried out")
	notStalled = cond(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonProgressing, "nothing blocks the policy")
)

// stalled is what the kstatus conditions say while c (Degraded True or
// Ready False) stalls the policy.
func stalled(st *v1alpha1.HotKeyPolicyStatus, c metav1.Condition) {
	st.Conditions[3] = cond(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonReconciled, "progress is stalled: see Stalled")
	st.Conditions[4] = cond(v1alpha1.ConditionStalled, metav1.ConditionTrue, c.Reason, c.Message)
}

// wantStatus is the status of statusPass as is, changed by mut.
func wantStatus(mut ...func(*v1alpha1.HotKeyPolicyStatus)) *v1alpha1.HotKeyPolicyStatus {
	st := &v1alpha1.HotKeyPolicyStatus{ObservedGeneration: 4, Epoch: 1000, RoutingConfigMap: routing.ConfigMapName("p"),
		RoutingVersion: 5, ReportingNodes: 3, Conditions: []metav1.Condition{published5, notHot, healthy, reconciled, notStalled}}
	for _, m := range mut {
		m(st)
	}
	return st
}

func hotKeys(n int) []decide.KeyDecision {
	out := make([]decide.KeyDecision, n)
	for i := range out {
		out[i] = decide.KeyDecision{Key: fmt.Sprintf("k%02d", i), WritesPerSecond: 5000, Shards: 4,
			Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, Source: v1alpha1.SourceDetected}
	}
	return out
}

func keyStatus(d decide.KeyDecision) v1alpha1.HotKeyStatus {
	return v1alpha1.HotKeyStatus{Key: d.Key, WritesPerSecond: d.WritesPerSecond, Shards: d.Shards, Mitigations: d.Mitigations, Source: d.Source}
}

func TestBuildStatus(t *testing.T) {
	events := func(n int) []schedule.Event {
		out := make([]schedule.Event, n)
		for i := range out {
			start := statusNow.Add(time.Duration(i+1) * time.Hour)
			out[i] = schedule.Event{Name: fmt.Sprintf("e%02d", i), PrewarmAt: start.Add(-time.Minute), Start: start, End: start.Add(time.Minute)}
		}
		return out
	}
	eventStatus := func(ev schedule.Event) v1alpha1.ScheduledEventStatus {
		return v1alpha1.ScheduledEventStatus{Name: ev.Name, PrewarmAt: metav1.NewTime(ev.PrewarmAt), Start: metav1.NewTime(ev.Start), End: metav1.NewTime(ev.End)}
	}
	degraded := func(reason, msg string) func(*v1alpha1.HotKeyPolicyStatus) {
		return func(st *v1alpha1.HotKeyPolicyStatus) {
			st.Conditions[2] = cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
			stalled(st, st.Conditions[2])
		}
	}
	long := strings.Repeat("x", 2000)
	for name, tc := range map[string]struct {
		pass *pass
		want *v1alpha1.HotKeyPolicyStatus
	}{
		"published, nothing hot, healthy": {pass: statusPass(), want: wantStatus()},
		"the routing version never goes backwards": {
			pass: statusPass(func(p *pass) { p.policy.Status.RoutingVersion = 9 }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.RoutingVersion = 9
				st.Conditions[0].Message = "routing table version 9 published"
			})},
		"publication failed": {
			pass: statusPass(func(p *pass) { p.pub.err = errors.New("apply routing ConfigMap: conflict") }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.Conditions[0] = cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPublishFailed, "apply routing ConfigMap: conflict")
				stalled(st, st.Conditions[0])
			})},
		"Observe mode": {
			pass: statusPass(func(p *pass) { p.spec.Mode = v1alpha1.ModeObserve }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.Conditions[0] = cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonObserving,
					"decisions are computed and shown in status; nothing is published")
			})},
		"Observe mode still draining splits from before": {
			pass: statusPass(func(p *pass) { p.spec.Mode, p.pub.draining = v1alpha1.ModeObserve, 2 }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.Conditions[0] = cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonObserving,
					"decisions are computed and shown in status; 2 keys split before the switch to Observe stay published until unsplit and folded")
				st.Conditions[3] = cond(v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonDrainingSplits,
					"2 keys split before the switch to Observe are being unsplit and folded")
			})},
		"keys mitigated": {
			pass: statusPass(func(p *pass) { p.out.Keys = hotKeys(2) }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.HotKeyCount, st.Moves = 2, "Split=2"
				st.HotKeys = []v1alpha1.HotKeyStatus{keyStatus(hotKeys(2)[0]), keyStatus(hotKeys(2)[1])}
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "2 keys mitigated")
			})},
		"keys left out by the cap are counted": {
			pass: statusPass(func(p *pass) { p.out.Keys, p.out.Capped = hotKeys(1), 3 }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.HotKeyCount, st.Moves = 1, "Split=1"
				st.HotKeys = []v1alpha1.HotKeyStatus{keyStatus(hotKeys(1)[0])}
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys,
					"1 keys mitigated; 3 more left out by capacity.maxMitigatedKeys")
			})},
		"status lists the first 50 hot keys and counts them all": {
			pass: statusPass(func(p *pass) { p.out.Keys = hotKeys(51) }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.HotKeyCount, st.Moves = 51, "Split=51"
				for _, k := range hotKeys(50) {
					st.HotKeys = append(st.HotKeys, keyStatus(k))
				}
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "51 keys mitigated")
			})},
		"since is shown in UTC whole seconds": {
			pass: statusPass(func(p *pass) {
				since := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("CET", 3600))
				p.out.Keys = hotKeys(1)
				p.out.Keys[0].Since = &since
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				since := metav1.NewTime(time.Date(2030, 1, 2, 2, 4, 5, 0, time.UTC))
				st.HotKeyCount, st.Moves = 1, "Split=1"
				st.HotKeys = []v1alpha1.HotKeyStatus{keyStatus(hotKeys(1)[0])}
				st.HotKeys[0].Since = &since
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "1 keys mitigated")
			})},
		"the last pass's hot keys and events are replaced, not kept": {
			pass: statusPass(func(p *pass) {
				p.policy.Status.HotKeys = []v1alpha1.HotKeyStatus{{Key: "gone"}}
				p.policy.Status.HotKeyCount = 1
				p.policy.Status.NextEvents = []v1alpha1.ScheduledEventStatus{{Name: "over"}}
			}),
			want: wantStatus()},
		"shown rates move only when they moved by more than a fifth": {
			pass: statusPass(func(p *pass) {
				p.out.Keys = hotKeys(2)
				prev := []v1alpha1.HotKeyStatus{keyStatus(hotKeys(2)[0]), keyStatus(hotKeys(2)[1])}
				p.policy.Status.HotKeys = prev
				p.out.Keys[0].WritesPerSecond = prev[0].WritesPerSecond*6/5 - 1 // +19.98%: kept
				p.out.Keys[1].WritesPerSecond = prev[1].WritesPerSecond*6/5 + 2 // over +20%: shown
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.HotKeyCount, st.Moves = 2, "Split=2"
				k1 := keyStatus(hotKeys(2)[1])
				k1.WritesPerSecond = k1.WritesPerSecond*6/5 + 2
				st.HotKeys = []v1alpha1.HotKeyStatus{keyStatus(hotKeys(2)[0]), k1}
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "2 keys mitigated")
			})},
		"hot keys in the order of their names, whatever their heat": {
			pass: statusPass(func(p *pass) {
				p.out.Keys = hotKeys(2)
				p.out.Keys[0], p.out.Keys[1] = p.out.Keys[1], p.out.Keys[0]
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.HotKeyCount, st.Moves = 2, "Split=2"
				st.HotKeys = []v1alpha1.HotKeyStatus{keyStatus(hotKeys(2)[0]), keyStatus(hotKeys(2)[1])}
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "2 keys mitigated")
			})},
		"a shown rate waits for its refresh, however far it moved; a new key shows its rate": {
			pass: statusPass(func(p *pass) {
				p.ratesDue = false
				p.out.Keys = hotKeys(2)
				p.policy.Status.HotKeys = []v1alpha1.HotKeyStatus{keyStatus(hotKeys(2)[0])}
				p.out.Keys[0].WritesPerSecond *= 3
				p.out.Keys[1].WritesPerSecond *= 2
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.HotKeyCount, st.Moves = 2, "Split=2"
				k1 := keyStatus(hotKeys(2)[1])
				k1.WritesPerSecond *= 2
				st.HotKeys = []v1alpha1.HotKeyStatus{keyStatus(hotKeys(2)[0]), k1}
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "2 keys mitigated")
			})},
		"a cooling key's rate keeps its shown value within a twentieth of the threshold": {
			pass: statusPass(func(p *pass) {
				p.out.Keys = hotKeys(1)
				prev := keyStatus(hotKeys(1)[0])
				prev.WritesPerSecond = 100
				p.policy.Status.HotKeys = []v1alpha1.HotKeyStatus{prev}
				p.out.Keys[0].WritesPerSecond = 100 - p.detect[1]/20 // -50%, but only 5 % of the threshold: kept
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				st.HotKeyCount, st.Moves = 1, "Split=1"
				k := keyStatus(hotKeys(1)[0])
				k.WritesPerSecond = 100
				st.HotKeys = []v1alpha1.HotKeyStatus{k}
				st.Conditions[1] = cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "1 keys mitigated")
			})},
		"one node of 1,000 more or less keeps the shown counts": {
			pass: statusPass(func(p *pass) {
				p.policy.Status.ReportingNodes, p.policy.Status.StaleNodes = 1000, 3
				p.agg.FreshNodes, p.agg.StaleNodes = 999, 4
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.ReportingNodes, st.StaleNodes = 1000, 3 },
				degraded(v1alpha1.ReasonStaleReports,
					"3 of 1003 nodes hosting the policy's pods sent no summary for 5 report intervals; their traffic is not counted"))},
		"a tenth of the nodes changes the shown counts": {
			pass: statusPass(func(p *pass) {
				p.policy.Status.ReportingNodes, p.policy.Status.StaleNodes = 1000, 3
				p.agg.FreshNodes, p.agg.StaleNodes = 899, 104
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.ReportingNodes, st.StaleNodes = 899, 104 },
				degraded(v1alpha1.ReasonStaleReports,
					"104 of 1003 nodes hosting the policy's pods sent no summary for 5 report intervals; their traffic is not counted"))},
		"the last stale node coming back is shown at once": {
			pass: statusPass(func(p *pass) {
				p.policy.Status.ReportingNodes, p.policy.Status.StaleNodes = 999, 1
				p.agg.FreshNodes = 1000
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.ReportingNodes = 1000 })},
		"the epoch stays while nothing is split (no write per epoch)": {
			pass: statusPass(func(p *pass) { p.policy.Status.Epoch = 999 }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.Epoch = 999 })},
		"the epoch follows the clock while a key is split": {
			pass: statusPass(func(p *pass) {
				p.policy.Status.Epoch = 999
				p.enforced = &decide.Output{Entries: []routing.Entry{{Key: "k", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 999, Shards: 4}}}}}}
			}),
			want: wantStatus()},
		"the first 32 schedule events": {
			pass: statusPass(func(p *pass) { p.evs = events(33) }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) {
				for _, ev := range events(32) {
					st.NextEvents = append(st.NextEvents, eventStatus(ev))
				}
			})},
		"a Redis failure is the first thing Degraded says": {
			pass: statusPass(func(p *pass) {
				p.act = actResult{reason: v1alpha1.ReasonRedisUnavailable, message: "dial tcp: refused"}
				p.schedErrs = []error{errors.New("schedule bf: bad cron")}
				p.agg.StaleNodes = 1
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.StaleNodes = 1 },
				degraded(v1alpha1.ReasonRedisUnavailable, "dial tcp: refused"))},
		"then invalid schedules, every one": {
			pass: statusPass(func(p *pass) {
				p.schedErrs = []error{errors.New("schedule bf: bad cron"), errors.New("schedule x: unknown time zone")}
				p.agg.StaleNodes = 1
			}),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.StaleNodes = 1 },
				degraded(ReasonInvalidSchedule, "schedule bf: bad cron\nschedule x: unknown time zone"))},
		"then stale nodes, out of every node hosting pods": {
			pass: statusPass(func(p *pass) { p.agg.StaleNodes = 1 }),
			want: wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.StaleNodes = 1 },
				degraded(v1alpha1.ReasonStaleReports,
					"1 of 4 nodes hosting the policy's pods sent no summary for 5 report intervals; their traffic is not counted"))},
		"a long Degraded message is cut at 1024 bytes": {
			pass: statusPass(func(p *pass) { p.act = actResult{reason: v1alpha1.ReasonRedisUnavailable, message: long} }),
			want: wantStatus(degraded(v1alpha1.ReasonRedisUnavailable, long[:1024]))},
	} {
		t.Run(name, func(t *testing.T) {
			before := tc.pass.policy.Status.DeepCopy()
			got := buildStatus(tc.pass)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, &tc.pass.policy.Status); diff != "" {
				t.Errorf("the policy's status was changed (-before +after):\n%s", diff)
			}
		})
	}
}

// conditionSet checks a condition setter on a status holding another
// condition: set must add want and leave the other one as it was.
func conditionSet(t *testing.T, st *v1alpha1.HotKeyPolicyStatus, set func(*v1alpha1.HotKeyPolicyStatus), want metav1.Condition) {
	t.Helper()
	other := metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "Other", Message: "not this setter's", ObservedGeneration: 1}
	st.Conditions = []metav1.Condition{other}
	set(st)
	if diff := cmp.Diff([]metav1.Condition{other, want}, st.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

func TestSetReadyCondition(t *testing.T) {
	for name, tc := range map[string]struct {
		mode v1alpha1.PolicyMode
		pub  publishResult
		want metav1.Condition
	}{
		"published: the version in force": {mode: v1alpha1.ModeEnforce, pub: publishResult{version: 4},
			want: cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, "routing table version 7 published")},
		"publication failed, whatever the mode": {mode: v1alpha1.ModeObserve, pub: publishResult{err: errors.New("apply: conflict"), draining: 2},
			want: cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPublishFailed, "apply: conflict")},
		"Observe mode": {mode: v1alpha1.ModeObserve,
			want: cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonObserving, "decisions are computed and shown in status; nothing is published")},
		"Observe mode still draining": {mode: v1alpha1.ModeObserve, pub: publishResult{draining: 3},
			want: cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonObserving,
				"decisions are computed and shown in status; 3 keys split before the switch to Observe stay published until unsplit and folded")},
	} {
		t.Run(name, func(t *testing.T) {
			st := &v1alpha1.HotKeyPolicyStatus{RoutingVersion: 7}
			conditionSet(t, st, func(st *v1alpha1.HotKeyPolicyStatus) { setReadyCondition(st, 4, tc.mode, tc.pub) }, tc.want)
		})
	}
}

func TestSetMitigatingCondition(t *testing.T) {
	shedOut := decide.Output{Keys: hotKeys(2), Entries: []routing.Entry{{Key: "a", Coalesce: true}, {Key: "b", Shed: &routing.Shed{WritesPerSecond: 100}}}}
	for name, tc := range map[string]struct {
		mode v1alpha1.PolicyMode
		out  decide.Output
		want metav1.Condition
	}{
		"nothing mitigated": {want: notHot},
		"nothing mitigated, some capped: still nothing mitigated": {out: decide.Output{Capped: 2}, want: notHot},
		"keys mitigated": {out: decide.Output{Keys: hotKeys(3)},
			want: cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "3 keys mitigated")},
		"keys mitigated, some capped": {out: decide.Output{Keys: hotKeys(1), Capped: 2},
			want: cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonHotKeys, "1 keys mitigated; 2 more left out by capacity.maxMitigatedKeys")},
		"a key shed": {mode: v1alpha1.ModeEnforce, out: shedOut,
			want: cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonShedding, "2 keys mitigated; 1 shed over their budget (the excess is refused with SHED)")},
		"a key that Enforce would shed, in Observe mode: nothing is refused": {mode: v1alpha1.ModeObserve, out: shedOut,
			want: cond(v1alpha1.ConditionMitigating, metav1.ConditionTrue, v1alpha1.ReasonWouldShed, "2 keys mitigated; 1 would be shed over their budget (Observe mode: nothing is refused)")},
	} {
		t.Run(name, func(t *testing.T) {
			conditionSet(t, &v1alpha1.HotKeyPolicyStatus{}, func(st *v1alpha1.HotKeyPolicyStatus) { setMitigatingCondition(st, 4, tc.mode, &tc.out) }, tc.want)
		})
	}
}

func TestSetDegradedCondition(t *testing.T) {
	redisDown := actResult{reason: v1alpha1.ReasonRedisUnavailable, message: "dial tcp: refused"}
	badCron := []error{errors.New("schedule bf: bad cron"), errors.New("schedule x: unknown time zone")}
	long := strings.Repeat("x", 2000)
	degraded := func(reason, msg string) metav1.Condition {
		return cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	}
	for name, tc := range map[string]struct {
		act              actResult
		schedErrs        []error
		reporting, stale int32
		want             metav1.Condition
	}{
		"healthy":             {reporting: 3, want: healthy},
		"Redis failed: first": {act: redisDown, schedErrs: badCron, stale: 1, want: degraded(v1alpha1.ReasonRedisUnavailable, "dial tcp: refused")},
		"then every bad schedule": {schedErrs: badCron, stale: 1,
			want: degraded(ReasonInvalidSchedule, "schedule bf: bad cron\nschedule x: unknown time zone")},
		"then stale nodes, out of every node hosting pods": {reporting: 3, stale: 1,
			want: degraded(v1alpha1.ReasonStaleReports, "1 of 4 nodes hosting the policy's pods sent no summary for 5 report intervals; their traffic is not counted")},
		"a long message is cut at 1024 bytes": {act: actResult{reason: v1alpha1.ReasonRedisUnavailable, message: long},
			want: degraded(v1alpha1.ReasonRedisUnavailable, long[:1024])},
	} {
		t.Run(name, func(t *testing.T) {
			st := &v1alpha1.HotKeyPolicyStatus{ReportingNodes: tc.reporting, StaleNodes: tc.stale}
			conditionSet(t, st, func(st *v1alpha1.HotKeyPolicyStatus) { setDegradedCondition(st, 4, tc.act, tc.schedErrs) }, tc.want)
		})
	}
}

func TestRatesRefreshed(t *testing.T) {
	k := func(key string, r, w int64) v1alpha1.HotKeyStatus {
		return v1alpha1.HotKeyStatus{Key: key, ReadsPerSecond: r, WritesPerSecond: w}
	}
	for name, tc := range map[string]struct {
		old, next []v1alpha1.HotKeyStatus
		want      bool
	}{
		"same rates":           {old: []v1alpha1.HotKeyStatus{k("a", 1, 2)}, next: []v1alpha1.HotKeyStatus{k("a", 1, 2)}},
		"a key came, one went": {old: []v1alpha1.HotKeyStatus{k("a", 1, 2)}, next: []v1alpha1.HotKeyStatus{k("b", 5, 5)}},
		"a shown read rate":    {old: []v1alpha1.HotKeyStatus{k("a", 1, 2)}, next: []v1alpha1.HotKeyStatus{k("a", 3, 2)}, want: true},
		"a shown write rate":   {old: []v1alpha1.HotKeyStatus{k("a", 1, 2), k("b", 0, 0)}, next: []v1alpha1.HotKeyStatus{k("b", 0, 0), k("a", 1, 9)}, want: true},
		"nothing shown before": {next: []v1alpha1.HotKeyStatus{k("a", 1, 2)}},
	} {
		if got := ratesRefreshed(tc.old, tc.next); got != tc.want {
			t.Errorf("%s: ratesRefreshed = %v, want %v", name, got, tc.want)
		}
	}
}

// TestBuildStatusTransitionTimes: a condition keeps its lastTransitionTime
// while its status holds, whatever its message says.
func TestBuildStatusTransitionTimes(t *testing.T) {
	then := metav1.NewTime(statusNow.Add(-time.Hour).Truncate(time.Second))
	old := func(c metav1.Condition) metav1.Condition { c.LastTransitionTime = then; return c }
	p := statusPass(func(p *pass) {
		p.pub.version = 6                                          // Ready's message changes, its status does not
		p.out.Keys = hotKeys(1)                                    // Mitigating turns True
		p.act = actResult{reason: v1alpha1.ReasonRedisUnavailable} // Degraded turns True
		p.policy.Status.Conditions = []metav1.Condition{old(published5), old(notHot), old(healthy)}
	})
	got := buildStatus(p)
	for typ, wantKept := range map[string]bool{v1alpha1.ConditionReady: true, v1alpha1.ConditionMitigating: false, v1alpha1.ConditionDegraded: false} {
		var c *metav1.Condition
		for i := range got.Conditions {
			if got.Conditions[i].Type == typ {
				c = &got.Conditions[i]
			}
		}
		if c == nil {
			t.Fatalf("no %s condition in %+v", typ, got.Conditions)
		}
		if kept := c.LastTransitionTime.Equal(&then); kept != wantKept || c.LastTransitionTime.IsZero() {
			t.Errorf("%s: lastTransitionTime %v, kept = %v, want kept = %v", typ, c.LastTransitionTime, kept, wantKept)
		}
	}
}

func TestTransitions(t *testing.T) {
	ready := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return cond(v1alpha1.ConditionReady, s, reason, "ready says "+reason)
	}
	mitigating := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return cond(v1alpha1.ConditionMitigating, s, reason, "mitigating says "+reason)
	}
	degraded := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return cond(v1alpha1.ConditionDegraded, s, reason, "degraded says "+reason)
	}
	steady := []metav1.Condition{ready(metav1.ConditionTrue, v1alpha1.ReasonPublished),
		mitigating(metav1.ConditionFalse, v1alpha1.ReasonNoHotKeys), degraded(metav1.ConditionFalse, v1alpha1.ReasonHealthy)}
	with := func(cs ...metav1.Condition) []metav1.Condition {
		out := append([]metav1.Condition(nil), steady...)
		for _, c := range cs {
			for i := range out {
				if out[i].Type == c.Type {
					out[i] = c
				}
			}
		}
		return out
	}
	ev := func(typ string, c metav1.Condition) transition {
		return transition{eventType: typ, reason: c.Reason, action: c.Type, message: c.Message}
	}
	for name, tc := range map[string]struct {
		old, next []metav1.Condition
		want      []transition
	}{
		"first pass of a healthy policy: only Ready is news": {next: steady,
			want: []transition{ev(corev1.EventTypeNormal, steady[0])}},
		"first pass, degraded from the start": {next: with(degraded(metav1.ConditionTrue, v1alpha1.ReasonCredentialsMissing)),
			want: []transition{ev(corev1.EventTypeNormal, steady[0]), ev(corev1.EventTypeWarning, degraded(metav1.ConditionTrue, v1alpha1.ReasonCredentialsMissing))}},
		"nothing changed":        {old: steady, next: steady},
		"only a message changed": {old: steady, next: with(cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, "routing table version 7 published"))},
		"keys became hot": {old: steady, next: with(mitigating(metav1.ConditionTrue, v1alpha1.ReasonHotKeys)),
			want: []transition{ev(corev1.EventTypeNormal, mitigating(metav1.ConditionTrue, v1alpha1.ReasonHotKeys))}},
		"a new reason with the same status": {old: steady, next: with(ready(metav1.ConditionTrue, v1alpha1.ReasonObserving)),
			want: []transition{ev(corev1.EventTypeNormal, ready(metav1.ConditionTrue, v1alpha1.ReasonObserving))}},
		"Degraded turns True: a Warning": {old: steady, next: with(degraded(metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable)),
			want: []transition{ev(corev1.EventTypeWarning, degraded(metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable))}},
		"Degraded changes reason: another Warning": {
			old:  with(degraded(metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable)),
			next: with(degraded(metav1.ConditionTrue, v1alpha1.ReasonStaleReports)),
			want: []transition{ev(corev1.EventTypeWarning, degraded(metav1.ConditionTrue, v1alpha1.ReasonStaleReports))}},
		"Degraded recovers": {old: with(degraded(metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable)), next: steady,
			want: []transition{ev(corev1.EventTypeNormal, steady[2])}},
		"Degraded turns True with Stalled: one Warning, none for the kstatus conditions": {old: steady,
			next: append(with(degraded(metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable)),
				cond(v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonDrainingSplits, "draining"),
				cond(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable, "degraded says "+v1alpha1.ReasonRedisUnavailable)),
			want: []transition{ev(corev1.EventTypeWarning, degraded(metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable))}},
		"Ready turns False: a Warning": {old: steady, next: with(ready(metav1.ConditionFalse, v1alpha1.ReasonPublishFailed)),
			want: []transition{ev(corev1.EventTypeWarning, ready(metav1.ConditionFalse, v1alpha1.ReasonPublishFailed))}},
		"keys start being shed: a Warning": {old: with(mitigating(metav1.ConditionTrue, v1alpha1.ReasonHotKeys)),
			next: with(mitigating(metav1.ConditionTrue, v1alpha1.ReasonShedding)),
			want: []transition{ev(corev1.EventTypeWarning, mitigating(metav1.ConditionTrue, v1alpha1.ReasonShedding))}},
		"Observe mode: keys would be shed, no Warning": {old: with(mitigating(metav1.ConditionTrue, v1alpha1.ReasonHotKeys)),
			next: with(mitigating(metav1.ConditionTrue, v1alpha1.ReasonWouldShed)),
			want: []transition{ev(corev1.EventTypeNormal, mitigating(metav1.ConditionTrue, v1alpha1.ReasonWouldShed))}},
		"shedding ends": {old: with(mitigating(metav1.ConditionTrue, v1alpha1.ReasonShedding)),
			next: with(mitigating(metav1.ConditionTrue, v1alpha1.ReasonHotKeys)),
			want: []transition{ev(corev1.EventTypeNormal, mitigating(metav1.ConditionTrue, v1alpha1.ReasonHotKeys))}},
	} {
		t.Run(name, func(t *testing.T) {
			got := transitions(tc.old, tc.next)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(transition{})); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDrainStatus(t *testing.T) {
	policy := &v1alpha1.HotKeyPolicy{}
	policy.Name, policy.Generation = "p", 4
	policy.Status.RoutingVersion = 7
	draining := cond(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonDraining,
		"policy deleted: 2 split keys are unsplit and folded before the routing table is removed")
	for name, tc := range map[string]struct {
		pub  publishResult
		act  actResult
		want *v1alpha1.HotKeyPolicyStatus
	}{
		"draining": {pub: publishResult{version: 8},
			want: &v1alpha1.HotKeyPolicyStatus{RoutingVersion: 8, Conditions: []metav1.Condition{draining, healthy}}},
		"the routing version never goes backwards": {pub: publishResult{version: 6},
			want: &v1alpha1.HotKeyPolicyStatus{RoutingVersion: 7, Conditions: []metav1.Condition{draining, healthy}}},
		"blocked by Redis": {pub: publishResult{version: 8}, act: actResult{reason: v1alpha1.ReasonRedisUnavailable, message: "dial tcp: refused"},
			want: &v1alpha1.HotKeyPolicyStatus{RoutingVersion: 8, Conditions: []metav1.Condition{draining,
				cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable,
					"deletion blocked: 2 split keys cannot be folded (dial tcp: refused); it retries after the margin. Annotate heatsink.dev/skip-fold=true to delete without folding (shard values stay in Redis, unread)")}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := drainStatus(policy, tc.pub, tc.act, 2)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCaughtUp: a pass that reads the policy from a cache that has not seen
// the last status write yet starts from that write, not from the status
// before it; once the cache serves a newer version, from the cache.
func TestCaughtUp(t *testing.T) {
	r := &HotKeyPolicyReconciler{}
	written := wantStatus(func(st *v1alpha1.HotKeyPolicyStatus) { st.HotKeyCount = 2 })
	policy := func(rv string) *v1alpha1.HotKeyPolicy {
		p := &v1alpha1.HotKeyPolicy{}
		p.Namespace, p.Name, p.ResourceVersion = "ns", "p", rv
		p.Status = *wantStatus()
		return p
	}
	r.caughtUp(policy("7")) // nothing written yet: nothing to do
	r.mem.with(client.ObjectKeyFromObject(policy("7")), func(m *policyMemory) { m.written = writtenStatus{baseRV: "7", status: written} })
	stale := policy("7")
	r.caughtUp(stale)
	if diff := cmp.Diff(written, &stale.Status); diff != "" {
		t.Errorf("cache behind the write: status (-want +got):\n%s", diff)
	}
	stale.Status.HotKeyCount = 9
	if written.HotKeyCount != 2 {
		t.Errorf("the remembered status was shared with the policy")
	}
	fresh := policy("8")
	r.caughtUp(fresh)
	if diff := cmp.Diff(wantStatus(), &fresh.Status); diff != "" {
		t.Errorf("cache past the write: status (-want +got):\n%s", diff)
	}
}

func TestMoves(t *testing.T) {
	m := func(ms ...v1alpha1.MitigationType) decide.KeyDecision { return decide.KeyDecision{Mitigations: ms} }
	for name, tc := range map[string]struct {
		keys []decide.KeyDecision
		want string
	}{
		"nothing mitigated": {want: ""},
		"counted over every key, cheapest move first": {keys: []decide.KeyDecision{
			m(v1alpha1.MitigationShed), m(v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache, v1alpha1.MitigationRefreshAhead),
			m(v1alpha1.MitigationCoalesce, v1alpha1.MitigationReplicaReads), m(v1alpha1.MitigationSplit, v1alpha1.MitigationShed)},
			want: "Coalesce=2,LocalCache=1,ReplicaReads=1,Split=1,RefreshAhead=1,Shed=2"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := moves(tc.keys); got != tc.want {
				t.Errorf("moves = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMitigationsListTheEnum: status.moves lists the mitigations of
// v1alpha1.MitigationOrder only; one missing from it would never be counted.
func TestMitigationsListTheEnum(t *testing.T) {
	src, err := os.ReadFile("../api/v1alpha1/hotkeypolicy_status_types.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "+kubebuilder:validation:Enum=")
	enum, _, _ := strings.Cut(rest, "\n")
	var got []string
	for _, m := range v1alpha1.MitigationOrder {
		got = append(got, string(m))
	}
	if strings.Join(got, ";") != enum {
		t.Errorf("v1alpha1.MitigationOrder %v, the enum lists %s", got, enum)
	}
}
