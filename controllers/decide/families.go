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
// (splitLayout).
func servedBy(t v1alpha1.MitigationType, fam routing.Families) routing.Families {
	switch t {
	case v1alpha1.MitigationReplicate:
		return routing.ServedReplicate
	case v1alpha1.MitigationSplit:
		l := splitLayout(fam)
		return routing.ServedBy(&routing.Entry{Split: &l})
	case v1alpha1.MitigationPreAggregate:
		return routing.ServedCounter
	}
	return routing.ServedRaw
}

// splitLayout is how split spreads a key whose clients send fam (a Split
// without generations): by member when they send the commands of one
// collection type (a hash by field, a sorted set or set by member;
// fits then asks whether that member split serves them all, and whyNot
// names those it would refuse), else as a string counter.
func splitLayout(fam routing.Families) routing.Split {
	if !fam.Known() {
		return routing.Split{}
	}
	switch {
	case fam&(setFamilies|zsetFamilies) == 0 && fam&hashFamilies != 0:
		return routing.Split{Members: true, Kind: routing.KindHash}
	case fam&(hashFamilies|setFamilies) == 0 && fam&zsetFamilies != 0:
		return routing.Split{Members: true, Kind: routing.KindZSet}
	case fam&(hashFamilies|zsetFamilies) == 0 && fam&setFamilies != 0:
		return routing.Split{Members: true, Kind: routing.KindSet}
	}
	return routing.Split{}
}

// splitOf is a one-generation split of n shards laid out for fam.
func splitOf(fam routing.Families, n int32) *routing.Split {
	s := splitLayout(fam)
	s.Generations = []routing.Generation{{Shards: n}}
	return &s
}

// dropReadMoves takes the read moves off a key split by member: the engine
// serves every read of such a key from its places (engine.ServeMembers), never
// from a cache or replica of the base key, so a read move in its entry
// would be shown and never applied.
func dropReadMoves(e *routing.Entry, d *KeyDecision) {
	if !e.Coalesce && e.LocalCache == nil && e.ReplicaReads == nil && e.Replicate == nil {
		return
	}
	e.Coalesce, e.LocalCache, e.ReplicaReads, e.Replicate = false, nil, nil, nil
	d.Replicas = 0
	d.Mitigations = slices.DeleteFunc(d.Mitigations, func(t v1alpha1.MitigationType) bool {
		switch t {
		case v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache, v1alpha1.MitigationReplicaReads, v1alpha1.MitigationReplicate:
			return true
		}
		return false
	})
	d.because("split by member serves the key's reads from its shards: the read moves do not apply")
}

const (
	hashFamilies = routing.FamHashRead | routing.FamHashWrite | routing.FamHashCounter | routing.FamHashOther
	zsetFamilies = routing.FamZSetRead | routing.FamZSetWrite | routing.FamZSetOther
	setFamilies  = routing.FamSetRead | routing.FamSetWrite | routing.FamSetOther
)

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
// the engine serves the deterministic one-key reads of every type itself
// (routing.RelievedReads) and passes scripts raw, so on a key read only by
// scripts they would only occupy the table. Unknown families, or no read seen, keep them: they
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
	return fmt.Sprintf("%s reads are passed to Redis raw: coalescing, the local cache and replicas relieve the deterministic one-key reads only", fam&readFamilies)
}

// replicateRelieves reports whether replicated copies relieve the key's
// reads: they hold strings, so the engine sends the reads of other types
// raw on a replicated key; on a hash or set they would only be written.
func replicateRelieves(fam routing.Families) bool {
	return !fam.Known() || fam&routing.FamStringRead != 0 || fam&readFamilies == 0
}

const readFamilies = routing.FamHashRead | routing.FamHashOther | routing.FamSetRead | routing.FamSetOther | routing.FamZSetRead | routing.FamZSetOther |
	routing.FamOrdered | routing.FamScript | routing.FamOther

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

// inForce names the moves in force on a key (cur, its entry in the table
// in force; current, its split's shards there) that the data plane refuses
// some commands under: split (and pre-aggregate with it) and replicate.
// The read moves refuse nothing. "" when none is.
func inForce(cur *routing.Entry, current int32) string {
	var moves []string
	if current > 0 {
		moves = append(moves, "split")
	}
	if cur != nil && cur.Replicate != nil {
		moves = append(moves, "replicate")
	}
	return strings.Join(moves, " and ")
}

// holdMoves decides whether the moves that can refuse commands (split,
// pre-aggregate, replicate) are held back from a key: the one
// implementation of undoing a move that hurts, for detected and scheduled
// keys alike. Those in force (inForce) are withdrawn and held for the
// policy's cooldown when the key's clients saw more errors under them than
// before them, that is any command refused because of them in the nodes'
// last report interval (o.Refused: no such refusal exists without a move),
// or more of the commands it served failed on its path than the same
// sidecars' direct commands did in the last 1 to 16 report intervals,
// all its commands or its reads or its other commands apart
// (MoveFailingApart: a failover of the whole upstream fails both alike
// and withdraws nothing),
// or when a split in force no longer serves every family they send (the
// families of refused commands reach the manager too). The hold, kept in
// the durable state, keeps clients that stopped sending the refused
// commands (a queue's producers gave up, a schedule's key fell silent)
// from bringing the move back at once and failing again. held is when the
// hold ends (zero if none).
func holdMoves(now time.Time, spec *v1alpha1.HotKeyPolicySpec, ks *KeyState, o Observation, cur *routing.Entry, current int32, d *KeyDecision) (held time.Time) {
	if ks.HeldUntil != nil && !now.Before(*ks.HeldUntil) {
		ks.HeldUntil, ks.HeldBecause = nil, ""
	}
	moves := inForce(cur, current)
	failOf, failWin, failing := MoveFailingApart(o.Moved, o.MovedReads, o.MovedOthers)
	var why string
	switch {
	case moves == "":
	case o.Refused > 0:
		why = fmt.Sprintf("%s withdrawn: %d of its clients' commands refused because of it in the last report interval", moves, o.Refused)
	case failing:
		why = whyFailed(moves, failOf, [...]MoveHistory{o.Moved, o.MovedReads, o.MovedOthers}[failOf], failWin)
	case current > 0 && o.Families.Known() && !fits(v1alpha1.MitigationSplit, o.Families):
		// Known families split cannot serve: its clients' commands were
		// refused. (Unknown ones, from an older reporter, say nothing of
		// refusals: no hold.)
		why = "split withdrawn, its clients' commands refused: " + whyNot(v1alpha1.MitigationSplit, o.Families)
	}
	if why != "" {
		until := now.Add(spec.Thresholds.Cooldown.Duration)
		ks.HeldUntil, ks.HeldBecause = &until, why
		d.because(why)
		return until
	}
	if until := ks.HeldUntil; until != nil {
		because := ks.HeldBecause
		if because == "" { // held by a manager that did not keep why
			because = "withdrawn after its clients' commands were refused"
		}
		d.because(fmt.Sprintf("%s; split and replicate not applied again before %s (the cooldown)", because, until.UTC().Format(time.RFC3339)))
		return *until
	}
	return time.Time{}
}

// mayRefuse says whether a move that refuses some commands may be chosen
// for a key whose clients sent fam, with d's reason when it may not: it
// must serve every family, and not be held (held non-zero).
func mayRefuse(t v1alpha1.MitigationType, fam routing.Families, held time.Time, d *KeyDecision) bool {
	if !fits(t, fam) {
		d.because(whyNot(t, fam))
		return false
	}
	return held.IsZero()
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
