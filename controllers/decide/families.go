package decide

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// servedBy is the families the data plane serves on a key mitigated by t
// whose clients send fam (routing's served sets, which dataplane/engine's
// Classify is tested against command by command): split spreads a string
// counter, or a hash of counters by field when fam says the key is one
// (splitByMember).
func servedBy(t v1alpha1.MitigationType, fam routing.Families) routing.Families {
	switch t {
	case v1alpha1.MitigationReplicate:
		return routing.ServedReplicate
	case v1alpha1.MitigationSplit:
		return routing.ServedBy(&routing.Entry{Split: &routing.Split{Members: splitByMember(fam)}})
	case v1alpha1.MitigationPreAggregate:
		return routing.ServedCounter
	}
	return routing.ServedRaw
}

// splitByMember reports whether a key whose clients send fam is split by
// field (routing.Split.Members) rather than as a string counter: its
// clients send hash commands (fits then asks whether a member split
// serves them all, and whyNot names those it would refuse).
func splitByMember(fam routing.Families) bool {
	return fam.Known() && fam&hashFamilies != 0
}

const hashFamilies = routing.FamHashRead | routing.FamHashWrite | routing.FamHashCounter | routing.FamHashOther

// fits reports whether t may be chosen for a key whose clients sent fam in
// the window: t serves every family (none seen: nothing to refuse).
// Families unknown (a reporter of an older version) allow only the moves
// that serve everything: any other could refuse a command nobody told the
// manager about.
func fits(t v1alpha1.MitigationType, fam routing.Families) bool {
	served := servedBy(t, fam)
	if !fam.Known() {
		return served == routing.ServedRaw
	}
	return served.Has(fam)
}

// readsRelieved reports whether the read moves (coalesce, local cache,
// replica reads, replicate) relieve any read the key's clients send:
// the engine serves string reads itself (routing.RelievedReads) and passes
// the reads of other types raw, so on a hash or set they would only
// occupy the table. Unknown families, or no read seen, keep them: they
// refuse nothing.
func readsRelieved(fam routing.Families) bool {
	return !fam.Known() || fam&routing.RelievedReads != 0 || fam&readFamilies == 0
}

// whyNot says, for status, Events and `heatsink top`, why t was not chosen
// for a key whose clients send fam.
func whyNot(t v1alpha1.MitigationType, fam routing.Families) string {
	move := moveName(t)
	switch {
	case !fam.Known():
		return "command families unknown (counted by a sidecar or node agent of an older version): " + move + " could refuse its commands"
	case fam&routing.FamScript != 0:
		return "used by scripts or functions: never " + move
	case fam&routing.FamOrdered != 0:
		return "list or stream (order-bearing, e.g. a queue): order forbids " + move
	case fam&routing.FamTx != 0 && servedBy(t, fam&^routing.FamTx).Has(fam&^routing.FamTx):
		return "sent inside MULTI, where " + move + " cannot take part"
	}
	return fmt.Sprintf("%s would refuse its %s commands", move, fam&^servedBy(t, fam))
}

// whyNoReads says why a read-hot key gets no read move.
func whyNoReads(fam routing.Families) string {
	return fmt.Sprintf("%s reads are passed to Redis raw: coalescing, the local cache and replicas relieve string reads only", fam&readFamilies)
}

const readFamilies = routing.FamHashRead | routing.FamHashOther | routing.FamSetRead | routing.FamZSetRead | routing.FamOrdered | routing.FamScript | routing.FamOther

func moveName(t v1alpha1.MitigationType) string {
	switch t {
	case v1alpha1.MitigationSplit:
		return "split"
	case v1alpha1.MitigationPreAggregate:
		return "pre-aggregate"
	case v1alpha1.MitigationReplicate:
		return "replicate"
	}
	return string(t)
}

// because records why a move was left out.
func (d *KeyDecision) because(why string) {
	if why == "" || strings.Contains(d.Reason, why) {
		return
	}
	if d.Reason != "" {
		d.Reason += "; "
	}
	d.Reason += why
}

// holdSplit decides whether a hot key may be split (split), given the
// families its clients sent: only if split serves them all, and not while
// a split withdrawn from the key is held back. A split in force (current
// shards > 0) that no longer fits was hurting: the sidecars refused
// commands of its clients, whose families reached the manager all the
// same. It is withdrawn, and held back for the policy's cooldown, so that
// clients that stopped sending the refused commands (a queue's consumers
// gave up) do not make it come back at once and fail again. held is when
// the hold ends (zero if none).
func holdSplit(now time.Time, spec *v1alpha1.HotKeyPolicySpec, ks *KeyState, fam routing.Families, current int32, d *KeyDecision) (split bool, held time.Time) {
	if ks.SplitHeldUntil != nil && !now.Before(*ks.SplitHeldUntil) {
		ks.SplitHeldUntil = nil
	}
	if !ks.WriteHot || !spec.Mitigations.Split.IsEnabled() {
		return false, time.Time{}
	}
	if !fits(v1alpha1.MitigationSplit, fam) {
		why := whyNot(v1alpha1.MitigationSplit, fam)
		if current > 0 && fam.Known() {
			// Known families it cannot serve: its clients' commands were
			// refused. (Unknown ones, from an older reporter, say nothing
			// of refusals: no hold.)
			until := now.Add(spec.Thresholds.Cooldown.Duration)
			ks.SplitHeldUntil = &until
			why = "split withdrawn, its clients' commands refused: " + why
		}
		d.because(why)
		return false, time.Time{}
	}
	if until := ks.SplitHeldUntil; until != nil {
		d.because(fmt.Sprintf("split withdrawn after its clients' commands were refused; not split again before %s (the cooldown)", until.UTC().Format(time.RFC3339)))
		return false, *until
	}
	return true, time.Time{}
}

// refrainScheduled settles a scheduled key's place after its schedule's
// moves were merged in: a key also detected but left unmitigated moves
// from refrained to the scheduled decision (with its reason), and a key
// every move of whose schedule would refuse its clients' commands moves
// to refrained.
func (m *mitigations) refrainScheduled(key string) {
	d := m.decisions[key]
	if i := slices.IndexFunc(m.refrained, func(r KeyDecision) bool { return r.Key == key }); i >= 0 {
		d.because(m.refrained[i].Reason)
		m.refrained = slices.Delete(m.refrained, i, i+1)
	}
	if len(d.Mitigations) == 0 {
		delete(m.decisions, key)
		delete(m.entries, key)
		m.refrained = append(m.refrained, *d)
	}
}
