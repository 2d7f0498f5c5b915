package decide

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// strFams are the families of a string key read with GET and written with
// SET and INCR: every move serves it.
const strFams = routing.FamStringRead | routing.FamStringWrite | routing.FamCounter | routing.FamKey

// mixCmd is one command of a generated client workload of key "k": commands (args) and
// whether each is sent inside MULTI.
type mixCmd struct {
	args [][]byte
	inTx bool
}

// TestNoMoveRefusesWhatClientsSend is the property of issue 33's first
// item: on generated command mixes of a key hot in both directions, with
// every move allowed, no command the key's clients sent in the window is
// refused by the engine (dataplane/engine.Classify itself, on the entry
// decide chose) because of the move chosen. Families unknown allow only
// moves that refuse nothing. A string counter's mix is still split, so the
// property does not hold by mitigating nothing.
func TestNoMoveRefusesWhatClientsSend(t *testing.T) {
	names := command.Names()
	slices.Sort(names)
	// Besides every keyed command, a pool per collection type: its
	// commands and the whole-key ones (DEL, EXISTS, the expiry
	// commands...), which a member split serves, so that mixes of a hash,
	// sorted set or set given a TTL or deleted are generated often.
	var keyed, wholeKey []string
	byType := map[routing.Families][]string{hashFamilies: nil, zsetFamilies: nil, setFamilies: nil}
	for _, n := range names {
		if args := command.Example(n, "k"); args != nil {
			keyed = append(keyed, n)
			c, _ := command.Lookup(args[0])
			for fams := range byType {
				if c.Family()&fams != 0 {
					byType[fams] = append(byType[fams], n)
				}
			}
			if c.Family()&(routing.FamKey|routing.FamTTL) != 0 {
				wholeKey = append(wholeKey, n)
			}
		}
	}
	pools := [][]string{keyed}
	for _, fams := range []routing.Families{hashFamilies, zsetFamilies, setFamilies} {
		pools = append(pools, byType[fams], append(slices.Clone(byType[fams]), wholeKey...))
	}
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) {
		m := &s.Mitigations
		m.Coalesce.Enabled, m.LocalCache.Enabled, m.Replicate.Enabled = ptr.To(true), ptr.To(true), ptr.To(true)
		m.Split.Enabled, m.PreAggregate.Enabled = ptr.To(true), ptr.To(true)
	})
	now := t0
	state := State{Keys: []KeyState{{Key: "k", ReadHot: true, WriteHot: true, Since: &now}}}
	decideFor := func(fam routing.Families) *routing.Entry {
		out := Decide(Input{Now: now, Spec: spec, State: state,
			Observations: map[string]Observation{"k": {ReadsPerSecond: 200_000, WritesPerSecond: 200_000, Families: fam}}})
		for i := range out.Entries {
			if out.Entries[i].Key == "k" {
				return &out.Entries[i]
			}
		}
		return nil
	}
	split, byMember, byMemberWholeKey := 0, 0, 0
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 33))
		var mix []mixCmd
		var fam routing.Families
		// Half the mixes draw from every keyed command, the others from
		// one collection type's pools, so that the member splits' served
		// sets are exercised as often as the counter's.
		pool := keyed
		if rng.IntN(2) == 0 {
			pool = pools[1+rng.IntN(len(pools)-1)]
		}
		for range 1 + rng.IntN(4) {
			c := mixCmd{args: command.Example(pool[rng.IntN(len(pool))], "k"), inTx: rng.IntN(8) == 0}
			info, _ := command.Lookup(c.args[0])
			fam |= info.FamilyOf(c.args)
			if c.inTx {
				fam |= routing.FamTx
			}
			mix = append(mix, c)
		}
		if rng.IntN(10) == 0 { // reported by an older sidecar too
			fam |= routing.FamUnknown
		}
		en := decideFor(fam)
		if en == nil {
			continue
		}
		if en.Split != nil {
			split++
			if en.Split.Members {
				byMember++
				if fam&(routing.FamKey|routing.FamTTL) != 0 {
					byMemberWholeKey++
				}
			}
		}
		lookup := func(key string) (*routing.Entry, bool) { return en, key == "k" }
		for _, c := range mix {
			if d := engine.Classify(c.args, lookup, c.inTx); d.Op == engine.OpRefuse {
				t.Errorf("seed %d: families %v, moves %+v: the engine refuses %q (in MULTI: %v): %s", seed, fam, en, c.args, c.inTx, d.Err)
			}
		}
	}
	if split == 0 || byMember == 0 || byMemberWholeKey == 0 {
		t.Errorf("%d generated mixes split, %d of them by member, %d of those with whole-key commands: the property holds vacuously", split, byMember, byMemberWholeKey)
	}
	if en := decideFor(strFams); en == nil || en.Split == nil || en.Replicate == nil {
		t.Errorf("a hot string counter's entry %+v, want split and replicated", en)
	}
}

// TestDecideByFamilies: a write-hot queue, leaderboard, hash counter or
// scripted key is not split, with the reason in its decision; a read-hot
// hash gets no read move that would only occupy the table; a key whose
// families are unknown gets only the moves that refuse nothing; a key no
// allowed move serves is listed in Refrained, or shed when shedding is
// allowed.
func TestDecideByFamilies(t *testing.T) {
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) {
		s.Mitigations.Coalesce.Enabled, s.Mitigations.Replicate.Enabled = ptr.To(true), ptr.To(true)
	})
	shedSpec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.Enabled = ptr.To(true) })
	now := t0
	for name, tc := range map[string]struct {
		spec      *v1alpha1.HotKeyPolicySpec
		reads     int64
		fam       routing.Families
		moves     []v1alpha1.MitigationType
		reason    string
		refrained bool
		kind      routing.MemberKind // of a member split (members: a hash, sorted set or set)
		members   bool
	}{
		"a string counter is split": {fam: routing.FamCounter | routing.FamStringRead,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}},
		"a queue is not split": {fam: routing.FamOrdered, refrained: true,
			reason: "list or stream (order-bearing, e.g. a queue): order forbids split"},
		"a Lua limiter is never split": {fam: routing.FamScript | routing.FamCounter | routing.FamTTL, refrained: true,
			reason: "used by scripts or functions: never split"},
		"a leaderboard is split by member, without a read move": {spec: spec, reads: 200_000, fam: routing.FamZSetWrite | routing.FamZSetRead,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, members: true, kind: routing.KindZSet,
			reason: "split by member serves the key's reads from its shards: the read moves do not apply"},
		"a sorted set with ZADD or ZREM is not split": {fam: routing.FamZSetWrite | routing.FamZSetRead | routing.FamZSetOther, refrained: true,
			reason: "split would refuse its zset-other commands"},
		"a set of flags added to is split by member": {fam: routing.FamSetWrite | routing.FamSetRead,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, members: true, kind: routing.KindSet},
		"a set with SPOP is not split": {fam: routing.FamSetWrite | routing.FamSetOther, refrained: true,
			reason: "split would refuse its set-other commands"},
		"a key sent hash and set commands is not split": {fam: routing.FamSetWrite | routing.FamHashCounter, refrained: true,
			reason: "split would refuse its hash-counter,set-write commands"},
		"a rate limiter's counter with EXPIRE is split": {fam: routing.FamCounter | routing.FamTTL,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}},
		"a counter with APPEND is not split": {fam: routing.FamCounter | routing.FamOther, refrained: true,
			reason: "split would refuse its other commands"},
		"a counter in MULTI is not split": {fam: routing.FamCounter | routing.FamTx, refrained: true,
			reason: "sent inside MULTI, where split cannot take part"},
		"unknown families are not split": {fam: routing.FamUnknown | routing.FamCounter, refrained: true,
			reason: "command families unknown (counted by a sidecar or node agent of an older version): split could refuse its commands"},
		"a read-hot key read only by scripts gets nothing": {spec: spec, reads: 200_000, fam: routing.FamScript, refrained: true,
			reason: "script reads are passed to Redis raw: coalescing, the local cache and replicas relieve the deterministic one-key reads only; used by scripts or functions: never split"},
		"a hash counter is split by field, without a read move": {spec: spec, reads: 200_000, fam: routing.FamHashRead | routing.FamHashCounter,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, members: true,
			reason: "split by member serves the key's reads from its shards: the read moves do not apply"},
		"a hash counter given a TTL and deleted is split by field": {fam: routing.FamHashRead | routing.FamHashCounter | routing.FamTTL | routing.FamKey,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, members: true},
		"a leaderboard given a TTL is split by member": {fam: routing.FamZSetWrite | routing.FamZSetRead | routing.FamTTL | routing.FamKey,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, members: true, kind: routing.KindZSet},
		"a set given a TTL is split by member": {fam: routing.FamSetWrite | routing.FamSetRead | routing.FamTTL,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, members: true, kind: routing.KindSet},
		"a hash with HSET is not split": {fam: routing.FamHashWrite | routing.FamHashCounter | routing.FamHashRead, refrained: true,
			reason: "split would refuse its hash-write commands"},
		"a hash with HINCRBYFLOAT is not split": {fam: routing.FamHashOther | routing.FamHashCounter, refrained: true,
			reason: "split would refuse its hash-other commands"},
		"a read-hot string with unknown families is coalesced, not replicated": {spec: spec, reads: 200_000, fam: routing.FamUnknown,
			moves: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce},
			reason: "command families unknown (counted by a sidecar or node agent of an older version): replicate could refuse its commands; " +
				"command families unknown (counted by a sidecar or node agent of an older version): split could refuse its commands"},
		"a queue is shed when shedding is allowed": {spec: shedSpec, fam: routing.FamOrdered,
			moves:  []v1alpha1.MitigationType{v1alpha1.MitigationShed},
			reason: "list or stream (order-bearing, e.g. a queue): order forbids split"},
	} {
		t.Run(name, func(t *testing.T) {
			sp := tc.spec
			if sp == nil {
				sp = testSpec()
			}
			st := State{Keys: []KeyState{{Key: "k", ReadHot: tc.reads > 0, WriteHot: true, Since: &now}}}
			out := Decide(Input{Now: now, Spec: sp, State: st,
				Observations: map[string]Observation{"k": {ReadsPerSecond: tc.reads, WritesPerSecond: 200_000, Families: tc.fam}}})
			var d *KeyDecision
			for _, list := range [][]KeyDecision{out.Keys, out.Refrained} {
				for i := range list {
					if list[i].Key == "k" {
						d = &list[i]
					}
				}
			}
			if d == nil {
				t.Fatalf("k is in neither Keys nor Refrained: %+v", out)
			}
			if got := len(out.Refrained) == 1; got != tc.refrained {
				t.Errorf("refrained %v, want %v", got, tc.refrained)
			}
			if !slices.Equal(d.Mitigations, tc.moves) || d.Reason != tc.reason || d.Families != tc.fam {
				t.Errorf("moves %v, reason %q, families %v; want %v, %q, %v", d.Mitigations, d.Reason, d.Families, tc.moves, tc.reason, tc.fam)
			}
			for _, en := range out.Entries {
				if en.Split != nil && (en.Split.Members != tc.members || en.Split.Kind != tc.kind) {
					t.Errorf("split by member %v kind %q, want %v %q", en.Split.Members, en.Split.Kind, tc.members, tc.kind)
				}
			}
			if tc.refrained && len(out.Entries) != 0 {
				t.Errorf("entries %+v for a key no move serves", out.Entries)
			}
		})
	}
}

// TestForcedSplitOfAQueueIsWithdrawn: a move chosen before the key's
// clients were known (a schedule splits a key that turns out to be a
// queue) refuses their LPUSH; the sidecar reports the refused commands'
// family all the same, and the next decision withdraws the split with the
// reason, so the clients recover without a restart.
func TestForcedSplitOfAQueueIsWithdrawn(t *testing.T) {
	spec := testSpec()
	now := t0
	sk := ScheduledKey{Key: "q", Schedule: "s", PrewarmAt: now.Add(-time.Minute), Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		Mitigation: v1alpha1.ScheduledMitigation{Split: &v1alpha1.ScheduledSplit{Shards: 4}}}
	// Before the sidecars' reports, from a reporter that did not say.
	decision := func(fam routing.Families) KeyDecision {
		out := Decide(Input{Now: now, Spec: spec, Scheduled: []ScheduledKey{sk},
			Observations: map[string]Observation{"q": {WritesPerSecond: 10, Families: fam}}})
		for _, d := range slices.Concat(out.Keys, out.Refrained) {
			if d.Key == "q" {
				return d
			}
		}
		return KeyDecision{}
	}
	if d := decision(routing.FamUnknown); !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("no traffic yet: the schedule's split is not applied: %+v", d)
	}
	d := decision(routing.FamOrdered)
	if slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) || d.Reason != "list or stream (order-bearing, e.g. a queue): order forbids split" {
		t.Fatalf("once the refused LPUSH are reported: %+v, want the split withdrawn with its reason", d)
	}
}

// TestHurtingSplitIsWithdrawnAndHeld: a split in force under which the
// key's clients send a command it refuses (LPUSH: the refused commands'
// family still reaches the manager) is withdrawn at the next decision,
// with the reason, and is not applied again before the cooldown even once
// the refused commands stop; after it, it is.
func TestHurtingSplitIsWithdrawnAndHeld(t *testing.T) {
	spec := testSpec()
	cooldown := spec.Thresholds.Cooldown.Duration
	now := t0
	state := State{Keys: []KeyState{{Key: "k", WriteHot: true, Since: &now}}}
	current := &routing.Table{EpochMillis: spec.Mitigations.Split.Epoch.Milliseconds(),
		Entries: []routing.Entry{{Key: "k", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1, Shards: 4}}}}}}
	pass := func(at time.Time, fam routing.Families, cur *routing.Table) (Output, KeyDecision) {
		out := Decide(Input{Now: at, Spec: spec, State: state, Current: cur,
			Observations: map[string]Observation{"k": {WritesPerSecond: 50_000, Families: fam}}})
		state = out.State
		for _, d := range slices.Concat(out.Keys, out.Refrained) {
			if d.Key == "k" {
				return out, d
			}
		}
		return out, KeyDecision{}
	}
	_, d := pass(now, strFams|routing.FamOrdered, current)
	if slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) || d.Reason != "split withdrawn, its clients' commands refused: "+
		"list or stream (order-bearing, e.g. a queue): order forbids split" {
		t.Fatalf("under refusals: %+v, want the split withdrawn with why", d)
	}
	// The refused commands stopped (the producers gave up): still held.
	later := now.Add(cooldown / 2)
	out, d := pass(later, strFams, nil)
	if slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) || !strings.Contains(d.Reason, "not applied again before") {
		t.Fatalf("within the cooldown: %+v, want the split still held back", d)
	}
	if want := now.Add(cooldown); out.NextCheck.After(want) || out.NextCheck.IsZero() {
		t.Errorf("next check %v, want by the hold's end %v", out.NextCheck, want)
	}
	if dur := state.Durable(); len(dur.Keys) != 1 || dur.Keys[0].HeldUntil == nil {
		t.Errorf("the hold is not in the durable state: %+v (a new leader would split again at once)", dur)
	}
	_, d = pass(now.Add(cooldown), strFams, nil)
	if !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) || d.Reason != "" {
		t.Fatalf("after the cooldown: %+v, want split again", d)
	}
}

// TestScheduledQueueListedOnce: a queue both detected write-hot and
// scheduled for a split is listed once, with one reason.
func TestScheduledQueueListedOnce(t *testing.T) {
	now := t0
	sk := ScheduledKey{Key: "q", Schedule: "s", PrewarmAt: now.Add(-time.Minute), Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		Mitigation: v1alpha1.ScheduledMitigation{Split: &v1alpha1.ScheduledSplit{Shards: 4}}}
	out := Decide(Input{Now: now, Spec: testSpec(), Scheduled: []ScheduledKey{sk},
		State:        State{Keys: []KeyState{{Key: "q", WriteHot: true, Since: &now}}},
		Observations: map[string]Observation{"q": {WritesPerSecond: 50_000, Families: routing.FamOrdered}}})
	if len(out.Keys) != 0 || len(out.Refrained) != 1 || out.Refrained[0].Reason != "list or stream (order-bearing, e.g. a queue): order forbids split" {
		t.Fatalf("keys %+v, refrained %+v; want the queue refrained once, with one reason", out.Keys, out.Refrained)
	}
}

// TestScheduledOnlyQueueShowsItsFamilies: a key only a schedule mitigates
// (not hot) carries its clients' families in its decision, which status
// shows beside the reason (test/clients TestForcedSplitOfAQueueIsUndone
// read an empty list before).
func TestScheduledOnlyQueueShowsItsFamilies(t *testing.T) {
	now := t0
	sk := ScheduledKey{Key: "q", Schedule: "s", PrewarmAt: now.Add(-time.Minute), Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		Mitigation: v1alpha1.ScheduledMitigation{Split: &v1alpha1.ScheduledSplit{Shards: 4}}}
	out := Decide(Input{Now: now, Spec: testSpec(), Scheduled: []ScheduledKey{sk},
		Observations: map[string]Observation{"q": {WritesPerSecond: 50, Families: routing.FamOrdered}}})
	if len(out.Refrained) != 1 || out.Refrained[0].Families != routing.FamOrdered {
		t.Fatalf("refrained %+v; want the queue refrained with its families (list/stream)", out.Refrained)
	}
}

// TestCoolingSplitKeptWithoutTraffic: a split key whose traffic stopped
// (no node lists it, so no family is seen) keeps its split while it cools
// down: no command seen is no command refused.
func TestCoolingSplitKeptWithoutTraffic(t *testing.T) {
	now := t0
	current := &routing.Table{Entries: []routing.Entry{{Key: "k", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1, Shards: 4}}}}}}
	out := Decide(Input{Now: now, Spec: testSpec(), Current: current, State: State{Keys: []KeyState{{Key: "k", WriteHot: true, Since: &now}}}})
	if len(out.Keys) != 1 || !slices.Contains(out.Keys[0].Mitigations, v1alpha1.MitigationSplit) || out.Keys[0].Reason != "" {
		t.Fatalf("keys %+v, refrained %+v: want k still split while it cools", out.Keys, out.Refrained)
	}
}

// TestSplitKindChangeUnsplitsFirst: a key split as a string counter whose
// clients now send a hash's commands (it was deleted and recreated as a
// hash) is not given a member split on top of the counter's generations,
// whose layouts cannot be mixed: the counter split is unsplit (a Shards: 0
// generation, folded later) and keeps its kind until its generations are
// gone.
func TestSplitKindChangeUnsplitsFirst(t *testing.T) {
	spec := testSpec()
	now := t0
	epochMillis := spec.Mitigations.Split.Epoch.Milliseconds()
	e := routing.EpochAt(now, epochMillis)
	cur := &routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: epochMillis, Entries: []routing.Entry{
		{Key: "k", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: e - 5, Shards: 4}}}}}}
	st := State{Keys: []KeyState{{Key: "k", WriteHot: true, Since: &now}}}
	out := Decide(Input{Now: now, Spec: spec, State: st, Current: cur, Margin: 10 * time.Second,
		Observations: map[string]Observation{"k": {WritesPerSecond: 200_000, Families: routing.FamHashRead | routing.FamHashCounter}}})
	var en *routing.Entry
	for i := range out.Entries {
		if out.Entries[i].Key == "k" {
			en = &out.Entries[i]
		}
	}
	if en == nil || en.Split == nil {
		t.Fatalf("entries %+v: the counter split's generations were dropped unfolded", out.Entries)
	}
	gens := en.Split.Generations
	if en.Split.Members || gens[len(gens)-1].Shards != 0 {
		t.Errorf("split %+v, want the counter's kind heading to 0 shards", *en.Split)
	}
}
