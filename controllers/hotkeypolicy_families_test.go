package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/routing"
)

const queueWhy = "list or stream (order-bearing, e.g. a queue): order forbids split"

func queueDecision() decide.KeyDecision {
	return decide.KeyDecision{Key: "queue:jobs", WritesPerSecond: 9000, Source: v1alpha1.SourceDetected,
		Families: routing.FamOrdered, Reason: queueWhy}
}

// TestStatusShowsFamiliesAndWhy: status lists a hot key no move serves
// (a queue) with its families and why, beside the mitigated keys with
// theirs; it is not counted as mitigated.
func TestStatusShowsFamiliesAndWhy(t *testing.T) {
	ctr := hotKeys(1)[0]
	ctr.Families = routing.FamCounter | routing.FamStringRead
	p := statusPass(func(p *pass) {
		p.out.Keys = []decide.KeyDecision{ctr}
		p.out.Refrained = []decide.KeyDecision{queueDecision()}
	})
	st := buildStatus(p)
	want := []v1alpha1.HotKeyStatus{keyStatus(ctr),
		{Key: "queue:jobs", WritesPerSecond: 9000, Source: v1alpha1.SourceDetected, Families: []string{"list/stream"}, Reason: queueWhy}}
	want[0].Families = []string{"string-read", "counter"}
	if d := cmp.Diff(want, st.HotKeys); d != "" {
		t.Errorf("hotKeys (-want +got):\n%s", d)
	}
	if st.HotKeyCount != 1 {
		t.Errorf("hotKeyCount %d, want 1: the queue is not mitigated", st.HotKeyCount)
	}
}

// TestMoveWithheldEvent: one Warning Event per key and reason, not one per
// pass.
func TestMoveWithheldEvent(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &HotKeyPolicyReconciler{Recorder: rec}
	p := statusPass(func(p *pass) {
		p.key = types.NamespacedName{Namespace: "ns", Name: "p"}
		p.out.Refrained = []decide.KeyDecision{queueDecision()}
	})
	r.noteWithheld(p)
	r.noteWithheld(p)
	p.out.Refrained[0].Reason = "used by scripts or functions: never split"
	r.noteWithheld(p)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"Warning MoveWithheld queue:jobs: " + queueWhy, "Warning MoveWithheld queue:jobs: used by scripts or functions: never split"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Events (-want +got):\n%s", d)
	}
}

// TestMoveWithheldEventHashed: a policy whose keys are hashed names the
// key of a withheld move by its hash, never raw.
func TestMoveWithheldEventHashed(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &HotKeyPolicyReconciler{Recorder: rec}
	names := keynames.New(keynames.Hashed, keynames.PolicyKey([]byte("k"), "ns", "p"))
	p := statusPass(func(p *pass) {
		p.key = types.NamespacedName{Namespace: "ns", Name: "p"}
		p.names = names
		p.out.Refrained = []decide.KeyDecision{queueDecision()}
	})
	r.noteWithheld(p)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"Warning MoveWithheld " + names.Name("queue:jobs") + ": " + queueWhy}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Events (-want +got):\n%s", d)
	}
}
