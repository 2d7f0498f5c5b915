package controllers

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/hub"
)

// ReasonMoveWithheld is the Warning Event raised when the manager leaves
// out a move a key's heat asked for because it would refuse commands the
// key's clients send (a queue not split, a scripted key not split...),
// once per key and reason.
const ReasonMoveWithheld = "MoveWithheld"

// annotateCandidates adds to the report's candidates the command families
// their clients sent, the moves applied and why one was left out.
func annotateCandidates(cands []v1alpha1.Candidate, snap hub.Snapshot, out *decide.Output) {
	byKey := make(map[string]*decide.KeyDecision, len(out.Keys)+len(out.Refrained))
	for _, list := range [][]decide.KeyDecision{out.Keys, out.Refrained} {
		for i := range list {
			byKey[list[i].Key] = &list[i]
		}
	}
	for i := range cands {
		c := &cands[i]
		c.Families = snap.Keys[c.Key].Families.Names()
		if d := byKey[c.Key]; d != nil {
			c.Mitigations, c.Reason = d.Mitigations, truncate(d.Reason)
		}
	}
}

// withheld maps each hot key a move was left out for to why.
func withheld(out *decide.Output) map[string]string {
	m := map[string]string{}
	for _, list := range [][]decide.KeyDecision{out.Keys, out.Refrained} {
		for _, d := range list {
			if d.Reason != "" {
				m[d.Key] = d.Reason
			}
		}
	}
	return m
}

// noteWithheld raises a Warning Event for each key a move is newly left out
// for, or for a new reason: "<key>: <reason>".
func (r *HotKeyPolicyReconciler) noteWithheld(p *pass) {
	now := withheld(&p.out)
	var before map[string]string
	r.mem.with(p.key, func(m *policyMemory) { before, m.withheld = m.withheld, now })
	if r.Recorder == nil || maps.Equal(before, now) {
		return
	}
	for _, key := range slices.Sorted(maps.Keys(now)) {
		if before[key] != now[key] {
			r.Recorder.Eventf(p.policy, nil, corev1.EventTypeWarning, ReasonMoveWithheld, "Decide", "%s", truncate(fmt.Sprintf("%s: %s", p.names.Name(key), now[key])))
		}
	}
}
