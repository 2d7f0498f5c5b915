package decide

import (
	"sort"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// KeyState is what the manager remembers about one key between reconciles:
// whether it is hot, and the hysteresis timers. The manager keeps it in
// memory and persists its durable part (Durable) beside the routing table
// whenever the table or a key's hotness changes: a newly elected manager
// keeps every hot key and starts the timers over (see docs/manager.md).
type KeyState struct {
	Key string `json:"key"`
	// ReadOverSince / WriteOverSince: when the rate went over its threshold
	// while the key was not yet hot for that direction.
	ReadOverSince  *time.Time `json:"readOverSince,omitempty"`
	WriteOverSince *time.Time `json:"writeOverSince,omitempty"`
	// ReadHot / WriteHot: the key is mitigated for that direction.
	ReadHot  bool `json:"readHot,omitempty"`
	WriteHot bool `json:"writeHot,omitempty"`
	// ReadUnderSince / WriteUnderSince: when a hot key fell under
	// threshold × (1 − hysteresis).
	ReadUnderSince  *time.Time `json:"readUnderSince,omitempty"`
	WriteUnderSince *time.Time `json:"writeUnderSince,omitempty"`
	// Since is when the key became hot (either direction).
	Since *time.Time `json:"since,omitempty"`
	// DetectedAt is when a hot key first went over a threshold before it
	// became hot (its earliest pending timer then). Observers
	// (the demo, the end-to-end test) date detections by it.
	DetectedAt *time.Time `json:"detectedAt,omitempty"`
	// ShrinkSince is when the sized split cardinality first fell below the
	// current one; the split shrinks only after sustainFor of that.
	ShrinkSince *time.Time `json:"shrinkSince,omitempty"`
	// ReadThreshold / WriteThreshold: the learned threshold a hot direction
	// became hot at (0 when typed or fallback); it holds until the
	// direction cools down (see limits).
	ReadThreshold  int64 `json:"readThreshold,omitempty"`
	WriteThreshold int64 `json:"writeThreshold,omitempty"`
	// HeldUntil: the key's moves that refuse some commands (split,
	// pre-aggregate, replicate) were withdrawn because its clients'
	// commands were refused under them; none is applied to it again before
	// (see holdMoves). Its JSON name is that of the first move held, kept
	// so that a state written by an earlier manager keeps its holds.
	HeldUntil *time.Time `json:"splitHeldUntil,omitempty"`
	// HeldBecause says why the moves were withdrawn, for status while they
	// are held.
	HeldBecause string `json:"heldBecause,omitempty"`
}

func (k *KeyState) hot() bool { return k.ReadHot || k.WriteHot }

// FirstOver is, per key of the state, the earliest moment it records the
// key over a threshold: while the key is pending (over, sustainFor not yet
// passed) or, once hot, when it was detected. Observers (the demo, the
// end-to-end test) read it from the published state to date a detection.
func (s State) FirstOver() map[string]time.Time {
	out := make(map[string]time.Time, len(s.Keys))
	for _, k := range s.Keys {
		for _, at := range []*time.Time{k.ReadOverSince, k.WriteOverSince, k.DetectedAt, k.Since} {
			if at != nil {
				if cur, ok := out[k.Key]; !ok || at.Before(cur) {
					out[k.Key] = *at
				}
			}
		}
	}
	return out
}

func (k *KeyState) idle() bool {
	return !k.hot() && k.ReadOverSince == nil && k.WriteOverSince == nil && k.HeldUntil == nil
}

// State is the remembered state of every key that is hot or on its way.
type State struct {
	// Keys sorted by Key.
	Keys []KeyState `json:"keys"`
}

// Durable is the part of s that must never be lost: which keys are hot and
// since when. The timers it leaves out (pending, cooling, shrinking) only
// delay a change when lost: a key's sustainFor, cooldown or shrink starts
// over, so nothing is mitigated early or withdrawn early. The manager
// writes the state when its durable part or the table changes, not at every
// timer, so that nothing is written while nothing changes.
func (s State) Durable() State {
	var out State
	for _, k := range s.Keys {
		if k.hot() || k.HeldUntil != nil {
			out.Keys = append(out.Keys, KeyState{Key: k.Key, ReadHot: k.ReadHot, WriteHot: k.WriteHot, Since: k.Since, DetectedAt: k.DetectedAt,
				ReadThreshold: k.ReadThreshold, WriteThreshold: k.WriteThreshold, HeldUntil: k.HeldUntil, HeldBecause: k.HeldBecause})
		}
	}
	return out
}

// ScheduledKey is a key a schedule mitigates in [PrewarmAt, End).
type ScheduledKey struct {
	Key       string
	Schedule  string
	PrewarmAt time.Time
	Start     time.Time
	End       time.Time
	// Mitigation asked for by the schedule.
	Mitigation v1alpha1.ScheduledMitigation
}

// Input is everything one decision depends on.
type Input struct {
	Now time.Time
	// Spec must be defaulted (v1alpha1.SetDefaults).
	Spec *v1alpha1.HotKeyPolicySpec
	// Observations are the summed rates of fresh reports.
	Observations map[string]Observation
	// State is the previous decision's State.
	State State
	// Current is the routing table in force (nil if none): its split
	// generations are the starting point of the next ones.
	Current *routing.Table
	// Scheduled keys of schedules in or before their window.
	Scheduled []ScheduledKey
	// Margin is how far ahead of a boundary a split change must be announced
	// and how long a replaced generation may still receive late writes.
	Margin time.Duration
	// Nodes is the count of nodes reporting (0: unknown); it caps a shed
	// key's MinPerSecond (see withShed).
	Nodes int
	// Shards are the policy's Redis masters as learned (nil: none yet), and
	// ShardOf the index in Shards of the master serving a key (-1 if
	// unknown; nil: every key unknown). They set the thresholds of
	// spec.thresholds.auto and the per-key capacity (see limits).
	Shards  []Shard
	ShardOf func(key string) int
}

// KeyDecision describes one mitigated key for status.
type KeyDecision struct {
	Key             string
	ReadsPerSecond  int64
	WritesPerSecond int64
	Mitigations     []v1alpha1.MitigationType
	// Shards is the target split cardinality, Replicas the replica count.
	Shards, Replicas int32
	// ShedReads and ShedWrites are the shed budgets, 0 when not shed.
	ShedReads, ShedWrites int64
	Since                 *time.Time
	Source                v1alpha1.HotKeySource
	// Families are the command families the key's clients sent in the
	// window, and Reason why a move its heat asked for was not chosen
	// (e.g. a write-hot queue is not split), "" when none was left out.
	Families routing.Families
	Reason   string
}

// Output is the decision.
type Output struct {
	State State
	// Entries is the next routing table's entries, sorted by key.
	Entries []routing.Entry
	// Keys are the mitigated keys, hottest first.
	Keys []KeyDecision
	// Folds are retired split generations whose shards must be folded into
	// the base key before they leave the table (see Prune).
	Folds []GenRef
	// NextCheck is when the decision changes by itself (zero: only on input).
	NextCheck time.Time
	// Started and Ended count keys that became hot / cooled down.
	Started, Ended int
	// Capped counts keys hot enough to mitigate but left out by
	// capacity.maxMitigatedKeys.
	Capped int
	// Refrained are the hot keys no allowed move serves (Reason says
	// why), hottest first: nothing is applied to them.
	Refrained []KeyDecision
}

// Decide computes the next routing decision. It is pure: same input, same
// output. It takes four steps, each its own function.
func Decide(in Input) Output {
	lim := newLimits(in)                  // the thresholds in force per key
	keys := advanceKeys(in, lim)          // 1. hysteresis per key
	m := mitigate(in, keys)               // 2. entries: detected keys, then scheduled ones
	splits := planSplits(in, m.entries)   // 3. splits move at epoch boundaries
	return assemble(lim, keys, m, splits) // 4. the output, sorted
}

// keyStates is what step 1 (advanceKeys) leaves: each key's state after
// this pass's hysteresis, and what changed.
type keyStates struct {
	byKey map[string]*KeyState
	// hottest lists byKey's keys, hottest first (by name among equals).
	hottest []string
	// next is when a timer runs out (zero if none).
	next time.Time
	// started and ended count the keys that became hot / cooled down;
	// capped those over a threshold long enough but left out by the cap.
	started, ended, capped int
}

// advanceKeys is step 1: the hysteresis of every key remembered in
// in.State and of every key newly observed over a threshold (step, per
// direction). Keys are taken hottest first, so that when
// capacity.maxMitigatedKeys bites the hottest keys win.
func advanceKeys(in Input, lim *limits) keyStates {
	spec, now := in.Spec, in.Now
	ks := keyStates{byKey: make(map[string]*KeyState, len(in.State.Keys)+len(in.Observations))}
	hotCount := 0
	for i := range in.State.Keys {
		k := in.State.Keys[i]
		ks.byKey[k.Key] = &k
		if k.hot() {
			hotCount++
		}
	}
	for key, o := range in.Observations {
		if _, ok := ks.byKey[key]; !ok {
			if r, w := lim.of(key, nil); o.ReadsPerSecond > r || o.WritesPerSecond > w {
				ks.byKey[key] = &KeyState{Key: key}
			}
		}
	}
	// Each key's thresholds, taken from its state before the pass.
	th := make(map[string][2]int64, len(ks.byKey))
	for key, k := range ks.byKey {
		r, w := lim.of(key, k)
		th[key] = [2]int64{r, w}
	}
	ks.hottest = make([]string, 0, len(ks.byKey))
	for k := range ks.byKey {
		ks.hottest = append(ks.hottest, k)
	}
	sort.Slice(ks.hottest, func(i, j int) bool {
		ki, kj := ks.hottest[i], ks.hottest[j]
		hi, hj := heat(th[ki], in.Observations[ki]), heat(th[kj], in.Observations[kj])
		if hi != hj {
			return hi > hj
		}
		return ks.hottest[i] < ks.hottest[j]
	})
	limit := int(spec.Capacity.MaxMitigatedKeys)
	for _, key := range ks.hottest {
		k := ks.byKey[key]
		o := in.Observations[key]
		if k.HeldUntil != nil {
			if !now.Before(*k.HeldUntil) {
				k.HeldUntil, k.HeldBecause = nil, "" // a key held but no longer hot nor scheduled is forgotten
			} else {
				ks.next = earliestNZ(ks.next, *k.HeldUntil)
			}
		}
		wasHot := k.hot()
		over := earliestPtr(k.ReadOverSince, k.WriteOverSince)
		room := hotCount < limit || wasHot
		wasR, wasW := k.ReadHot, k.WriteHot
		n1 := step(now, &k.ReadHot, &k.ReadOverSince, &k.ReadUnderSince, o.ReadsPerSecond, th[key][0], o.Bound, o.ReadsOverFor, spec, room)
		room = room || k.ReadHot
		n2 := step(now, &k.WriteHot, &k.WriteOverSince, &k.WriteUnderSince, o.WritesPerSecond, th[key][1], o.Bound, o.WritesOverFor, spec, room)
		ks.next = earliestNZ(ks.next, n1, n2)
		freezeR, freezeW := lim.freezes(key)
		k.ReadThreshold = frozen(wasR, k.ReadHot, freezeR, k.ReadThreshold, th[key][0])
		k.WriteThreshold = frozen(wasW, k.WriteHot, freezeW, k.WriteThreshold, th[key][1])
		switch {
		case !wasHot && k.hot():
			t := now
			k.Since = &t
			// Over since before this pass, or only now (sustainFor 0).
			k.DetectedAt = &t
			if over != nil {
				d := *over
				k.DetectedAt = &d
			}
			hotCount++
			ks.started++
		case wasHot && !k.hot():
			k.Since, k.DetectedAt = nil, nil
			hotCount--
			ks.ended++
		}
		if !k.hot() && (k.ReadOverSince != nil || k.WriteOverSince != nil) && !room {
			ks.capped++
		}
	}
	return ks
}

// mitigations is what step 2 (mitigate) leaves: the routing entry and the
// status decision of every mitigated key, by key.
type mitigations struct {
	entries   map[string]*routing.Entry
	decisions map[string]*KeyDecision
	// refrained are the hot keys left unmitigated, with why, hottest first.
	refrained []KeyDecision
	// next is when a split shrink is due (zero if none).
	next time.Time
}

// mitigate is step 2: the entries of the hot keys (detectedEntry), then
// those of the scheduled keys in [PrewarmAt, End) merged in
// (mergeScheduled). It moves the hot keys' shrink timers in keys.
func mitigate(in Input, keys keyStates) mitigations {
	m := mitigations{entries: make(map[string]*routing.Entry), decisions: make(map[string]*KeyDecision)}
	pk := perKeyOf(in)
	for _, key := range keys.hottest {
		ks := keys.byKey[key]
		if !ks.hot() {
			continue
		}
		o, seen := in.Observations[key]
		e, d, next := detectedEntry(in.Now, in.Spec, pk, key, ks, o, seen, entryOf(in.Current, key), lastShards(in.Current, key))
		e, d = withShed(in.Spec, pk, key, ks, in.Observations[key], e, d, currentShed(in.Current, key), in.Nodes)
		m.next = earliestNZ(m.next, next)
		switch {
		case e != nil:
			m.entries[key] = e
			d.Since = ks.Since
			m.decisions[key] = d
		case d != nil && d.Reason != "":
			m.refrained = append(m.refrained, *d)
		}
	}
	for _, sk := range in.Scheduled {
		if in.Now.Before(sk.PrewarmAt) || !in.Now.Before(sk.End) {
			continue
		}
		ks := keys.byKey[sk.Key]
		if ks == nil {
			// A key only scheduled: its state holds a move withdrawn from it.
			ks = &KeyState{Key: sk.Key}
			keys.byKey[sk.Key] = ks
		}
		next := mergeScheduled(in.Now, in.Spec, m.entries, m.decisions, sk, ks, in.Observations[sk.Key], entryOf(in.Current, sk.Key), lastShards(in.Current, sk.Key))
		m.next = earliestNZ(m.next, next)
		m.refrainScheduled(sk.Key)
	}
	return m
}

// splitPlan is what step 3 (planSplits) leaves besides the entries it
// updates: the retired generations to fold, and when the plan changes by
// itself (zero if never).
type splitPlan struct {
	folds []GenRef
	next  time.Time
}

// planSplits is step 3: every key split now (in.Current) or to be split
// (entries) moves its generations toward the size entries ask for, at
// epoch boundaries (planGenerations). It updates entries: a key no longer
// split keeps its generations until folded (an entry with only the split,
// if it is no longer mitigated otherwise: reads still sum the shards,
// writes go to the base key), and a split with no generation left is
// removed.
func planSplits(in Input, entries map[string]*routing.Entry) splitPlan {
	var plan splitPlan
	desired := make(map[string]int32)
	layout := make(map[string]routing.Split) // Members and Kind
	for key, e := range entries {
		if e.Split != nil {
			desired[key] = e.Split.Generations[0].Shards
			layout[key] = routing.Split{Members: e.Split.Members, Kind: e.Split.Kind}
		}
	}
	var current map[string]*routing.Entry
	if in.Current != nil {
		current = make(map[string]*routing.Entry, len(in.Current.Entries))
		for i := range in.Current.Entries {
			current[in.Current.Entries[i].Key] = &in.Current.Entries[i]
		}
	}
	splitKeys := make(map[string]bool)
	for k := range desired {
		splitKeys[k] = true
	}
	for k, e := range current {
		if e.Split != nil {
			splitKeys[k] = true
		}
	}
	epochMillis := in.Spec.Mitigations.Split.Epoch.Milliseconds()
	for key := range splitKeys {
		var gens []routing.Generation
		want, l := desired[key], layout[key]
		if c := current[key]; c != nil && c.Split != nil {
			gens = c.Split.Generations
			if c.Split.Members != l.Members || c.Split.Kind != l.Kind {
				// The layouts of a counter and of the member splits of
				// each type cannot be mixed: the split in force is
				// unsplit and folded first, and the other kind follows
				// once its generations are gone.
				want, l = 0, routing.Split{Members: c.Split.Members, Kind: c.Split.Kind}
			}
		}
		gens, folds, next := planGenerations(in.Now, epochMillis, in.Margin, key, gens, want)
		plan.folds = append(plan.folds, folds...)
		plan.next = earliestNZ(plan.next, next)
		e := entries[key]
		if len(gens) == 0 {
			if e != nil {
				e.Split, e.PreAggregate = nil, nil
			}
			continue
		}
		if e == nil {
			// No longer mitigated but still split: only the split, until
			// folded.
			e = &routing.Entry{Key: key, Source: routing.SourceDetected}
			if c := current[key]; c != nil {
				e.Source, e.NotBefore, e.NotAfter = c.Source, c.NotBefore, c.NotAfter
			}
			entries[key] = e
		}
		e.Split = &routing.Split{Generations: gens, Members: l.Members, Kind: l.Kind}
		if l.Members {
			e.PreAggregate = nil
		}
	}
	return plan
}

// assemble is step 4: the Output of the three steps before, sorted: the
// entries left with a mitigation by key, the folds by key and epoch, the
// mitigated keys hottest first, the state of every key not idle by key,
// and the earliest time any of them changes by itself.
func assemble(lim *limits, keys keyStates, m mitigations, splits splitPlan) Output {
	out := Output{NextCheck: earliestNZ(keys.next, m.next, splits.next), Started: keys.started, Ended: keys.ended, Capped: keys.capped,
		Refrained: m.refrained}
	out.Entries = make([]routing.Entry, 0, len(m.entries))
	for _, e := range m.entries {
		if hasMitigation(e) {
			out.Entries = append(out.Entries, *e)
		}
	}
	sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Key < out.Entries[j].Key })
	out.Folds = splits.folds
	sort.Slice(out.Folds, func(i, j int) bool {
		if out.Folds[i].Key != out.Folds[j].Key {
			return out.Folds[i].Key < out.Folds[j].Key
		}
		return out.Folds[i].FromEpoch < out.Folds[j].FromEpoch
	})
	for _, d := range m.decisions {
		out.Keys = append(out.Keys, *d)
	}
	sort.Slice(out.Keys, func(i, j int) bool {
		ki, kj := out.Keys[i].Key, out.Keys[j].Key
		ri, wi := lim.of(ki, keys.byKey[ki])
		rj, wj := lim.of(kj, keys.byKey[kj])
		hi := heat([2]int64{ri, wi}, Observation{ReadsPerSecond: out.Keys[i].ReadsPerSecond, WritesPerSecond: out.Keys[i].WritesPerSecond})
		hj := heat([2]int64{rj, wj}, Observation{ReadsPerSecond: out.Keys[j].ReadsPerSecond, WritesPerSecond: out.Keys[j].WritesPerSecond})
		if hi != hj {
			return hi > hj
		}
		return out.Keys[i].Key < out.Keys[j].Key
	})
	for _, key := range sortedKeys(keys.byKey) {
		if ks := keys.byKey[key]; !ks.idle() {
			out.State.Keys = append(out.State.Keys, *ks)
		}
	}
	return out
}

// step advances one direction's hysteresis. A key becomes hot after rate has
// stayed over threshold for sustainFor (and only if room), and stops being
// hot after it has stayed under threshold × (1 − hysteresis) for cooldown.
// It returns when the state would change by itself, or zero.
//
// Decisions are on counts, not bounds: a rate that is only an upper bound
// (bound) over the threshold starts and keeps the timer (the true rate may
// be over; the hub pins such a key so that the next summaries count it
// exactly), but the key becomes hot only on a count over the threshold once
// the timer has run; a count at or under the threshold ends the timer. So
// no sustainFor, however short against the report interval, mitigates a key
// on the bound's error alone, and a key truly over is mitigated at
// sustainFor, or as soon as its count arrives if later (the hub asks for a
// pass then). Cooling needs no such rule: a bound under the hysteresis band
// means the true rate is under it too.
//
// countedFor, when set, is how long the source (the hub) has seen the
// count over at every summary (Observation.ReadsOverFor): the count must
// have stayed over for sustainFor, whatever the passes saw. A
// pass sees only some summaries, so a key whose count went over and under
// between passes, over at two of them sustainFor apart, was hot at the
// second: the timer had started on its bound, or on one count over. The
// pass-sampled timer (overSince) still starts at the first pass over, for
// DetectedAt, and is the timer of the sources that do not track.
func step(now time.Time, hot *bool, overSince, underSince **time.Time, rate, threshold int64, bound bool, countedFor time.Duration, spec *v1alpha1.HotKeyPolicySpec, room bool) time.Time {
	sustain, cooldown := spec.Thresholds.SustainFor.Duration, spec.Thresholds.Cooldown.Duration
	if !*hot {
		*underSince = nil
		if rate <= threshold {
			*overSince = nil
			return time.Time{}
		}
		due, ok := held(overSince, now, sustain)
		if !bound && countedFor > 0 {
			due = now.Add(sustain - countedFor)
			ok = countedFor >= sustain
		}
		if !ok {
			return due
		}
		if bound || !room {
			return time.Time{}
		}
		*hot, *overSince = true, nil
		return time.Time{}
	}
	low := float64(threshold) * (1 - float64(spec.Thresholds.HysteresisPercent)/100)
	if float64(rate) >= low {
		*underSince = nil
		return time.Time{}
	}
	if due, ok := held(underSince, now, cooldown); !ok {
		return due
	}
	*hot, *underSince = false, nil
	return time.Time{}
}

// detectedEntry chooses the mitigations of a hot key, cheapest first: reads
// get coalescing, then a local cache, then, only when one physical key
// cannot serve the read rate (or nothing cheaper is allowed), reads from the
// shard's Redis replicas, or replicated copies where replica reads are not
// allowed; writes get a split (and pre-aggregation where the policy opts
// in).
//
// A split grows at once but shrinks only past the hysteresis band (see
// shrinkSize) and after the smaller size has held for sustainFor (reports of several nodes arrive one by one, so a sum may dip
// for a moment), and never while the key cools down: shrinking first and
// unsplitting shortly after would only churn generations.
//
// A key no node listed in this pass (seen false: its traffic unseen for a
// moment, between two summaries) keeps the moves in force that can refuse
// commands but gets no new one: with no family seen, nothing says its
// clients' commands fit it (a BullMQ marker key, sent scripts and BZPOPMIN
// and so never split, was split in such a pass and its scripts refused:
// test/apps TestApplications).
func detectedEntry(now time.Time, spec *v1alpha1.HotKeyPolicySpec, pk perKey, key string, ks *KeyState, o Observation, seen bool, cur *routing.Entry, current int32) (*routing.Entry, *KeyDecision, time.Time) {
	m := &spec.Mitigations
	e := &routing.Entry{Key: key, Source: routing.SourceDetected}
	d := &KeyDecision{Key: key, ReadsPerSecond: o.ReadsPerSecond, WritesPerSecond: o.WritesPerSecond, Source: v1alpha1.SourceDetected, Families: o.Families}
	fam := o.Families
	held := holdMoves(now, spec, ks, o, cur, current, d)
	next := held
	if ks.ReadHot && !readsRelieved(fam) {
		d.because(whyNoReads(fam))
	}
	if ks.ReadHot && readsRelieved(fam) {
		if m.Coalesce.IsEnabled() {
			e.Coalesce = true
			d.Mitigations = append(d.Mitigations, v1alpha1.MitigationCoalesce)
		}
		if m.LocalCache.IsEnabled() {
			e.LocalCache = &routing.LocalCache{TTLMillis: m.LocalCache.TTL.Milliseconds(), JitterPercent: m.LocalCache.JitterPercent, RefreshAheadPercent: m.LocalCache.RefreshAhead()}
			d.Mitigations = append(d.Mitigations, v1alpha1.MitigationLocalCache)
			if e.LocalCache.RefreshAheadPercent > 0 {
				d.Mitigations = append(d.Mitigations, v1alpha1.MitigationRefreshAhead)
			}
		}
		need := withHeadroom(o.ReadsPerSecond, spec.Capacity.HeadroomPercent) > float64(pk.reads)
		replicaReads := m.ReplicaReads.IsEnabled() && (need || len(d.Mitigations) == 0)
		if replicaReads {
			// The shard's replicas exist anyway: reading them costs no
			// memory and no write, so they come before copies.
			e.ReplicaReads = &routing.ReplicaReads{MaxLagMillis: m.ReplicaReads.MaxLag.Milliseconds()}
			d.Mitigations = append(d.Mitigations, v1alpha1.MitigationReplicaReads)
		}
		wantReplicate := m.Replicate.IsEnabled() && !replicaReads && (need || len(d.Mitigations) == 0) && replicateRelieves(fam)
		blind := !seen && (cur == nil || cur.Replicate == nil)
		if wantReplicate && !blind && mayRefuse(v1alpha1.MitigationReplicate, fam, held, d) {
			n := Size(o.ReadsPerSecond, spec.Capacity.HeadroomPercent, pk.reads, m.Replicate.MaxReplicas)
			e.Replicate = &routing.Replicate{Replicas: n, TTLMillis: m.Replicate.ReplicaTTL.Milliseconds()}
			d.Replicas = n
			d.Mitigations = append(d.Mitigations, v1alpha1.MitigationReplicate)
		}
	}
	blind := !seen && current == 0
	if ks.WriteHot && spec.Mitigations.Split.IsEnabled() && !blind && mayRefuse(v1alpha1.MitigationSplit, fam, held, d) {
		n := Size(o.WritesPerSecond, spec.Capacity.HeadroomPercent, pk.writes, m.Split.MaxShards)
		if n < current {
			// Shrink only past the hysteresis band: the smaller size must
			// still suffice at rate / (1 - hysteresis). A rate wobbling
			// across a rounding boundary would otherwise resize every epoch.
			n = min(current, shrinkSize(o.WritesPerSecond, spec, pk.writes))
		}
		switch {
		case n >= current:
			ks.ShrinkSince = nil
		case ks.WriteUnderSince != nil:
			n = current
		default:
			if ks.ShrinkSince == nil {
				t := now
				ks.ShrinkSince = &t
			}
			if due := ks.ShrinkSince.Add(spec.Thresholds.SustainFor.Duration); now.Before(due) {
				n, next = current, due
			} else {
				ks.ShrinkSince = nil
			}
		}
		e.Split = splitOf(fam, n)
		d.Shards = n
		d.Mitigations = append(d.Mitigations, v1alpha1.MitigationSplit)
		if m.PreAggregate.IsEnabled() && !e.Split.Members { // it sums string increments
			e.PreAggregate = &routing.PreAggregate{FlushMillis: m.PreAggregate.FlushInterval.Milliseconds()}
			d.Mitigations = append(d.Mitigations, v1alpha1.MitigationPreAggregate)
		}
		if e.Split.Members {
			dropReadMoves(e, d)
		}
	}
	if !ks.WriteHot {
		ks.ShrinkSince = nil
	}
	if len(d.Mitigations) == 0 {
		return nil, d, next
	}
	return e, d, next
}

// mergeScheduled adds a scheduled key's mitigations. A key also detected hot
// keeps its unbounded detected entry with the larger of both sizes; a key
// only scheduled is bounded to the event by NotBefore/NotAfter, published
// from PrewarmAt so that sidecars hold it before the event starts.
//
// A move that refuses some commands is left out while the key's state holds
// it back (holdMoves, which withdraws one in force that hurts): a
// schedule's split of a key that turned out to be a queue does not return
// once the queue's clients stop, to fail again when they come back. It
// returns when the hold ends (zero if none).
func mergeScheduled(now time.Time, spec *v1alpha1.HotKeyPolicySpec, entries map[string]*routing.Entry, decisions map[string]*KeyDecision, sk ScheduledKey, ks *KeyState, o Observation, cur *routing.Entry, current int32) time.Time {
	e, d := entries[sk.Key], decisions[sk.Key]
	if e == nil {
		nb, na := sk.Start, sk.End
		e = &routing.Entry{Key: sk.Key, Source: routing.SourceScheduled, NotBefore: &nb, NotAfter: &na}
		since := sk.Start
		d = &KeyDecision{Key: sk.Key, ReadsPerSecond: o.ReadsPerSecond, WritesPerSecond: o.WritesPerSecond, Families: o.Families,
			Source: v1alpha1.SourceScheduled, Since: &since}
		entries[sk.Key], decisions[sk.Key] = e, d
	}
	held := holdMoves(now, spec, ks, o, cur, current, d)
	m := sk.Mitigation
	add := func(t v1alpha1.MitigationType) {
		for _, x := range d.Mitigations {
			if x == t {
				return
			}
		}
		d.Mitigations = append(d.Mitigations, t)
	}
	if m.Coalesce && spec.Mitigations.Coalesce.IsEnabled() {
		e.Coalesce = true
		add(v1alpha1.MitigationCoalesce)
	}
	if m.LocalCache != nil && spec.Mitigations.LocalCache.IsEnabled() {
		ttl := spec.Mitigations.LocalCache.TTL.Duration
		if m.LocalCache.TTL != nil {
			ttl = m.LocalCache.TTL.Duration
		}
		if e.LocalCache == nil || ttl.Milliseconds() < e.LocalCache.TTLMillis {
			e.LocalCache = &routing.LocalCache{TTLMillis: ttl.Milliseconds(), JitterPercent: spec.Mitigations.LocalCache.JitterPercent, RefreshAheadPercent: spec.Mitigations.LocalCache.RefreshAhead()}
		}
		add(v1alpha1.MitigationLocalCache)
		if e.LocalCache.RefreshAheadPercent > 0 {
			add(v1alpha1.MitigationRefreshAhead)
		}
	}
	if m.ReplicaReads && spec.Mitigations.ReplicaReads.IsEnabled() {
		if e.ReplicaReads == nil {
			e.ReplicaReads = &routing.ReplicaReads{MaxLagMillis: spec.Mitigations.ReplicaReads.MaxLag.Milliseconds()}
		}
		add(v1alpha1.MitigationReplicaReads)
	}
	// A schedule asks for its moves before any traffic says what the
	// key's clients send; once the window says so, a move that would refuse
	// some of it is left out like a detected key's.
	refuses := func(t v1alpha1.MitigationType) bool {
		if o.Families.Known() && !fits(t, o.Families) {
			d.because(whyNot(t, o.Families))
			return true
		}
		return !held.IsZero()
	}
	if m.Replicate != nil && spec.Mitigations.Replicate.IsEnabled() && !refuses(v1alpha1.MitigationReplicate) {
		if e.Replicate == nil || e.Replicate.Replicas < m.Replicate.Replicas {
			e.Replicate = &routing.Replicate{Replicas: m.Replicate.Replicas, TTLMillis: spec.Mitigations.Replicate.ReplicaTTL.Milliseconds()}
			d.Replicas = m.Replicate.Replicas
		}
		add(v1alpha1.MitigationReplicate)
	}
	if m.Split != nil && spec.Mitigations.Split.IsEnabled() && !refuses(v1alpha1.MitigationSplit) {
		if e.Split == nil || e.Split.Generations[0].Shards < m.Split.Shards {
			e.Split = splitOf(o.Families, m.Split.Shards)
			d.Shards = m.Split.Shards
		}
		add(v1alpha1.MitigationSplit)
	}
	sort.Slice(d.Mitigations, func(i, j int) bool { return mitigationRank(d.Mitigations[i]) < mitigationRank(d.Mitigations[j]) })
	return held
}

// heat ranks keys by how far over its worse threshold (th: reads, writes)
// they are.
func heat(th [2]int64, o Observation) float64 {
	r := float64(o.ReadsPerSecond) / float64(max(th[0], 1))
	w := float64(o.WritesPerSecond) / float64(max(th[1], 1))
	return max(r, w)
}

// frozen is a direction's frozen threshold after a pass: set to the
// learned threshold it became hot at (freeze), kept while hot, cleared
// when it cools.
func frozen(wasHot, hot, freeze bool, cur, th int64) int64 {
	switch {
	case !hot:
		return 0
	case !wasHot && freeze:
		return th
	default:
		return cur
	}
}

// lastShards is the cardinality of the newest generation of key in t, 0 if
// none.
// entryOf is key's entry in t (nil if none, or no table).
func entryOf(t *routing.Table, key string) *routing.Entry {
	if t == nil {
		return nil
	}
	return t.Lookup(key)
}

func lastShards(t *routing.Table, key string) int32 {
	if t == nil {
		return 0
	}
	e := t.Lookup(key)
	if e == nil || e.Split == nil {
		return 0
	}
	g := e.Split.Generations
	return g[len(g)-1].Shards
}

func hasMitigation(e *routing.Entry) bool {
	return e.Coalesce || e.LocalCache != nil || e.ReplicaReads != nil || e.Replicate != nil || e.Split != nil || e.PreAggregate != nil || e.Shed != nil
}

func sortedKeys(m map[string]*KeyState) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func earliestNZ(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if !t.IsZero() {
			out = earliest(out, t)
		}
	}
	return out
}

// held starts *since at now when unset and reports whether the condition it
// marks has held for d; if not, due is when it will have.
// earliestPtr is the earliest of the set times, nil if none is.
func earliestPtr(ts ...*time.Time) *time.Time {
	var out *time.Time
	for _, t := range ts {
		if t != nil && (out == nil || t.Before(*out)) {
			out = t
		}
	}
	return out
}

func held(since **time.Time, now time.Time, d time.Duration) (due time.Time, ok bool) {
	if *since == nil {
		t := now
		*since = &t
	}
	due = (*since).Add(d)
	return due, !now.Before(due)
}
