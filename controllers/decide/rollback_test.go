package decide

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// keyDecision is k's decision in out (listed or refrained; zero if none).
func keyDecision(out Output, k string) KeyDecision {
	for _, d := range slices.Concat(out.Keys, out.Refrained) {
		if d.Key == k {
			return d
		}
	}
	return KeyDecision{}
}

// TestRefusedCommandsRollASplitBack: a split in force whose clients' every
// family it serves (the served sets claim so) but whose commands the
// sidecars still report refused because of it (Observation.Refused) is
// withdrawn at the next decision, with the count in its reason, and held:
// not split again within the cooldown once the refusals stop, split again
// after it. (Families alone, which fit, would keep it.)
func TestRefusedCommandsRollASplitBack(t *testing.T) {
	spec := testSpec()
	cooldown := spec.Thresholds.Cooldown.Duration
	now := t0
	state := State{Keys: []KeyState{{Key: "k", WriteHot: true, Since: &now}}}
	current := &routing.Table{EpochMillis: spec.Mitigations.Split.Epoch.Milliseconds(),
		Entries: []routing.Entry{{Key: "k", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1, Shards: 4}}}}}}
	pass := func(at time.Time, refused int64, cur *routing.Table) (Output, KeyDecision) {
		out := Decide(Input{Now: at, Spec: spec, State: state, Current: cur,
			Observations: map[string]Observation{"k": {WritesPerSecond: 50_000, Families: strFams, Refused: refused}}})
		state = out.State
		return out, keyDecision(out, "k")
	}
	if _, d := pass(now, 0, current); !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("no refusal: %+v, want the split kept", d)
	}
	_, d := pass(now, 12, current)
	if slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) ||
		d.Reason != "split withdrawn: 12 of its clients' commands refused because of it in the last report interval" {
		t.Fatalf("12 commands refused under the split: %+v, want it withdrawn with the count", d)
	}
	out, d := pass(now.Add(cooldown/2), 0, nil)
	if slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) || !strings.Contains(d.Reason, "not applied again before") {
		t.Fatalf("within the cooldown, refusals stopped: %+v, want the split held back", d)
	}
	if want := now.Add(cooldown); out.NextCheck.IsZero() || out.NextCheck.After(want) {
		t.Errorf("next check %v, want by the hold's end %v", out.NextCheck, want)
	}
	if _, d := pass(now.Add(cooldown), 0, nil); !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) || d.Reason != "" {
		t.Fatalf("after the cooldown: %+v, want split again", d)
	}
}

// TestRefusedCommandsRollReplicateBack: the same for replicate, a read
// move that refuses some commands: a read-hot key whose replicate in force
// has commands refused is left with the moves that refuse nothing
// (coalesce) until the cooldown.
func TestRefusedCommandsRollReplicateBack(t *testing.T) {
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) {
		s.Mitigations.Coalesce.Enabled = ptr.To(true)
		s.Mitigations.Replicate.Enabled = ptr.To(true)
		s.Capacity.PerShardReadsPerSecond = 1000
	})
	now := t0
	state := State{Keys: []KeyState{{Key: "k", ReadHot: true, Since: &now}}}
	current := &routing.Table{Entries: []routing.Entry{{Key: "k", Coalesce: true, Replicate: &routing.Replicate{Replicas: 4}}}}
	obs := Observation{ReadsPerSecond: 50_000, Families: routing.FamStringRead, Refused: 3}
	out := Decide(Input{Now: now, Spec: spec, State: state, Current: current, Observations: map[string]Observation{"k": obs}})
	d := keyDecision(out, "k")
	if slices.Contains(d.Mitigations, v1alpha1.MitigationReplicate) || !slices.Contains(d.Mitigations, v1alpha1.MitigationCoalesce) ||
		!strings.HasPrefix(d.Reason, "replicate withdrawn: 3 of its clients' commands refused") {
		t.Fatalf("3 commands refused under replicate: %+v, want replicate withdrawn, coalesce kept", d)
	}
	obs.Refused = 0
	out = Decide(Input{Now: now.Add(time.Second), Spec: spec, State: out.State, Observations: map[string]Observation{"k": obs}})
	if d := keyDecision(out, "k"); slices.Contains(d.Mitigations, v1alpha1.MitigationReplicate) {
		t.Fatalf("within the cooldown: %+v, want replicate held back", d)
	}
	out = Decide(Input{Now: now.Add(spec.Thresholds.Cooldown.Duration), Spec: spec, State: out.State, Observations: map[string]Observation{"k": obs}})
	if d := keyDecision(out, "k"); !slices.Contains(d.Mitigations, v1alpha1.MitigationReplicate) {
		t.Fatalf("after the cooldown: %+v, want replicate again", d)
	}
}

// TestScheduledSplitHeldAfterItsClientsStop: a schedule's split of a key
// that turns out to be a queue is withdrawn once the refused LPUSH are
// reported; when the queue's clients stop (no family seen: nothing to
// refuse) the schedule does not split it again before the cooldown, so
// they do not fail again when they come back. (Before the hold applied to
// scheduled keys, it was split again at once.)
func TestScheduledSplitHeldAfterItsClientsStop(t *testing.T) {
	spec := testSpec()
	cooldown := spec.Thresholds.Cooldown.Duration
	now := t0
	sk := ScheduledKey{Key: "q", Schedule: "s", PrewarmAt: now.Add(-time.Minute), Start: now.Add(-time.Minute), End: now.Add(10 * cooldown),
		Mitigation: v1alpha1.ScheduledMitigation{Split: &v1alpha1.ScheduledSplit{Shards: 4}}}
	current := &routing.Table{EpochMillis: spec.Mitigations.Split.Epoch.Milliseconds(),
		Entries: []routing.Entry{{Key: "q", Source: routing.SourceScheduled, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1, Shards: 4}}}}}}
	var state State
	pass := func(at time.Time, obs map[string]Observation, cur *routing.Table) KeyDecision {
		out := Decide(Input{Now: at, Spec: spec, State: state, Current: cur, Scheduled: []ScheduledKey{sk}, Observations: obs})
		state = out.State
		return keyDecision(out, "q")
	}
	d := pass(now, map[string]Observation{"q": {WritesPerSecond: 50, Families: routing.FamOrdered, Refused: 20}}, current)
	if slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("the queue's LPUSH refused: %+v, want the scheduled split withdrawn", d)
	}
	if d := pass(now.Add(cooldown/2), nil, nil); slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("the queue's clients stopped, within the cooldown: %+v, want the split held back", d)
	}
	if dur := state.Durable(); len(dur.Keys) != 1 || dur.Keys[0].HeldUntil == nil {
		t.Errorf("the scheduled key's hold is not in the durable state: %+v", dur)
	}
	if d := pass(now.Add(cooldown), nil, nil); !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("after the cooldown: %+v, want the schedule's split again", d)
	}
}

// TestUnseenHotKeyGetsNoNewMove: a write-hot key no node listed in this
// pass (no observation: its traffic unseen between two summaries) gets no
// new split, for no family says its clients' commands fit one (a BullMQ
// marker key, sent scripts and never split, was split in such a pass and
// its scripts refused); one seen with its families is split as before, and
// one split already keeps its split (TestCoolingSplitKeptWithoutTraffic).
func TestUnseenHotKeyGetsNoNewMove(t *testing.T) {
	now := t0
	state := State{Keys: []KeyState{{Key: "k", WriteHot: true, Since: &now}}}
	out := Decide(Input{Now: now, Spec: testSpec(), State: state})
	if d := keyDecision(out, "k"); slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("unseen: %+v, want no new split", d)
	}
	out = Decide(Input{Now: now, Spec: testSpec(), State: state, Observations: map[string]Observation{"k": {WritesPerSecond: 50_000, Families: strFams}}})
	if d := keyDecision(out, "k"); !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("seen: %+v, want split", d)
	}
}
