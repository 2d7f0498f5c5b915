package hub

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// view is the manager's picture of one policy's traffic across the fleet,
// kept current summary by summary: each node's last summary, and per key the
// sums the estimates need, so that a snapshot costs O(keys), not
// O(nodes × keys).
//
// The estimate of a key (see docs/node-agent.md, "The guarantee"):
//   - lower = Σ rates of the nodes that listed it (the larger of the sum of
//     window averages and the sum of recent rates);
//   - upper = lower + Σ Unseen of the fresh nodes that did not list it (each
//     such node saw it below its Unseen bound);
//   - a pinned key is counted exactly by every node that applied the
//     directive pinning it, so once every fresh node has, upper = lower.
//
// Decisions take the exact sum when there is one, otherwise the upper bound,
// marked as a bound (decide.Observation.Bound): a bound over a threshold
// starts the key's sustainFor timer (a key whose cluster-wide rate reaches
// its threshold is never missed) and gets the key pinned, and only a count
// (the exact sum once every node applied the pin, or any sum when no node
// has an Unseen bound) makes it hot: nothing at or under its threshold is
// mitigated for estimation error, whatever sustainFor.
//
// A view is not safe for concurrent use; the hub guards it.
type view struct {
	nodes map[string]*nodeState
	keys  map[string]*keySum
	// unseen is Σ Unseen over the nodes in nodes.
	unseen agentlink.Rates
	// expected are the nodes hosting pods of the policy, with when each
	// started to: a node is stale when it is expected, has been for the
	// grace period, and sends nothing.
	expected map[string]time.Time
	// pins maps each pinned key to the directive version that pinned it
	// (mirrored in each key's keySum.pin, so the hot path looks up once).
	pins map[string]uint64
	// th are the thresholds a key's band is placed against (Hub.SetPolicy).
	th Thresholds
	// interval is the policy's report interval (Hub.SetPolicy): what the
	// windows of moves' outcomes are counted in (moveInterval), and
	// movedCheckAt when movesFailing last checked them, refusedAt when
	// refusalsReported last asked for a pass.
	interval     time.Duration
	movedCheckAt time.Time
	refusedAt    time.Time
	// bandChanged records that a key crossed a band (takeBandChange).
	bandChanged bool
	// newCandidate records that a key not pinned entered the warm or hot
	// band (takeNewCandidate): the pins are chosen again at once.
	newCandidate bool
	// stamp numbers apply calls, to re-band each touched key once.
	stamp   uint64
	scratch []*keySum
	// minDir caches minDirective while minDirOK.
	minDir   uint64
	minDirOK bool
}

type nodeState struct {
	session, seq uint64
	lastSeen     time.Time
	directive    uint64
	unseen       agentlink.Rates
	total        agentlink.Rates
	keys         []agentlink.KeyRates
	bigKeys      []agentlink.KeySize
	// refused are the node's refusals because of a key's move since its
	// previous summary (agentlink.PolicySummary.Refused).
	refused []agentlink.KeyCount
	// moved are the node's reports of the outcomes of the commands keys'
	// moves served, with their baseline, received within the longest of
	// decide's windows (keepMoved).
	moved []movedReport
}

type keySum struct {
	// reads and writes sum the nodes' window averages, rreads and rwrites
	// their recent rates (agentlink.KeyRates).
	reads, writes, bytes float64
	rreads, rwrites      float64
	// unseenR and unseenW are Σ Unseen of the nodes that listed the key.
	unseenR, unseenW float64
	reporters        int
	// fams counts, per routing.Families bit, the nodes whose summary
	// listed the key with that family: the key's families are the bits
	// some node reports (families), ORed over the nodes and their windows.
	fams famCounts
	// pin is the directive version that pinned the key (0: not pinned),
	// band its last band (see band), stamp the apply that last touched it.
	pin   uint64
	band  uint8
	stamp uint64
	// overR and overW are since when the key's count has been over its
	// read (write) threshold at every summary and sweep that touched it
	// (zero: it is not, or it is only a bound): what sustainFor is judged
	// on (decide.Observation.ReadsOverFor).
	overR, overW time.Time
}

func newView() *view {
	return &view{nodes: map[string]*nodeState{}, keys: map[string]*keySum{}, expected: map[string]time.Time{}, pins: map[string]uint64{}}
}

// apply takes one node's summary for this policy, received at now. A summary
// older than the last one of the same agent session is ignored; a new session
// (the agent restarted) replaces the node's counts. Every key the summary or
// the node's previous one listed is re-placed in its band, once; a change is
// recorded for takeBandChange.
func (v *view) apply(now time.Time, node string, session, seq uint64, ps *agentlink.PolicySummary) {
	old := v.nodes[node]
	if old != nil && old.session == session && seq <= old.seq {
		return
	}
	n := &nodeState{session: session, seq: seq, lastSeen: now, directive: ps.Directive, unseen: ps.Unseen, total: ps.Total, keys: ps.Keys, bigKeys: ps.BigKeys, refused: ps.Refused}
	var prev []movedReport
	if old != nil {
		prev = old.moved
	}
	n.moved = keepMoved(prev, now, v.moveInterval(), ps.Moved)
	v.nodes[node] = n
	if old == nil || old.directive != n.directive {
		v.minDirOK = false
	}
	v.stamp++
	// Add the new summary first, so that keys in both stay alive.
	v.unseen.Reads += n.unseen.Reads
	v.unseen.Writes += n.unseen.Writes
	touched := v.scratch[:0]
	for i := range n.keys {
		k := &n.keys[i]
		s := v.keys[k.Key]
		if s == nil {
			s = &keySum{pin: v.pins[k.Key]}
			v.keys[k.Key] = s
		}
		s.reads += k.Reads
		s.writes += k.Writes
		s.rreads += k.RecentReads
		s.rwrites += k.RecentWrites
		s.bytes += k.Bytes
		s.unseenR += n.unseen.Reads
		s.unseenW += n.unseen.Writes
		s.reporters++
		s.fams.add(k.Families, 1)
		s.stamp = v.stamp
		touched = append(touched, s)
	}
	if old != nil {
		v.subtract(now, old, true)
	}
	for _, s := range touched {
		v.reband(now, s)
	}
	v.scratch = touched[:0]
}

// subtract removes a node's contributions. With reband, a key left with no
// reporter counts as leaving its band, and a remaining key the current
// apply did not touch is re-placed.
func (v *view) subtract(now time.Time, n *nodeState, reband bool) {
	v.unseen.Reads -= n.unseen.Reads
	v.unseen.Writes -= n.unseen.Writes
	for i := range n.keys {
		k := &n.keys[i]
		s := v.keys[k.Key]
		if s == nil {
			continue
		}
		s.reporters--
		if s.reporters <= 0 {
			// Dropping the entry also drops the float error its additions
			// and subtractions accumulated.
			if s.band != 0 {
				v.bandChanged = true
			}
			delete(v.keys, k.Key)
			continue
		}
		s.reads -= k.Reads
		s.writes -= k.Writes
		s.rreads -= k.RecentReads
		s.rwrites -= k.RecentWrites
		s.bytes -= k.Bytes
		s.unseenR -= n.unseen.Reads
		s.unseenW -= n.unseen.Writes
		s.fams.add(k.Families, -1)
		if reband && s.stamp != v.stamp {
			s.stamp = v.stamp
			v.reband(now, s)
		}
	}
}

// reband places a key in its band (cold, warm, hot; reads and writes) and
// records a change, and keeps since when its count has been over each
// threshold (countedOver).
func (v *view) reband(now time.Time, s *keySum) {
	if v.th.Reads == 0 && v.th.Writes == 0 {
		return
	}
	e := v.estimate(s)
	val := e.value()
	s.overR = countedOver(s.overR, e.counted && v.th.Reads > 0 && val.Reads > float64(v.th.Reads), now)
	s.overW = countedOver(s.overW, e.counted && v.th.Writes > 0 && val.Writes > float64(v.th.Writes), now)
	br, bw := band(val.Reads, v.th.Reads, v.th.Hysteresis), band(val.Writes, v.th.Writes, v.th.Hysteresis)
	b := uint8(br*3 + bw)
	if e.counted && (br == 2 || bw == 2) {
		// A key over a threshold turning into a count is a change too: only a
		// count makes it hot (decide.Observation.Bound), and a pass whose
		// sustainFor ran out on the bound waits for it.
		b |= 16
	}
	if b != s.band {
		s.band = b
		v.bandChanged = true
		if s.pin == 0 && (br > 0 || bw > 0) {
			v.newCandidate = true
		}
	}
}

// countedOver is since when a key's count has been over a threshold, given
// since when it had been (zero: it had not) and whether it is now (over: a
// count, not a bound, over the threshold). The hub sees every summary and
// sweep, where decision passes see only some: a key whose count went under
// between two passes and was over at both was, before, hot at the second
// if its bound had been over since the first (a counter at 0.95 × its
// threshold, 1,000 nodes, in the fleet simulator). So sustainFor is judged
// here, on counts alone.
func countedOver(since time.Time, over bool, now time.Time) time.Time {
	switch {
	case !over:
		return time.Time{}
	case since.IsZero():
		return now
	}
	return since
}

// overFor is how long a key's count has been over a threshold at now,
// given since when (zero: it is not).
func overFor(since, now time.Time) time.Duration {
	if since.IsZero() || now.Before(since) {
		return 0
	}
	return now.Sub(since)
}

// takeNewCandidate reports whether a key not pinned entered the warm or hot
// band since the last call.
func (v *view) takeNewCandidate() bool {
	c := v.newCandidate
	v.newCandidate = false
	return c
}

// rebandAll re-places every key: an upper bound moves whenever any node's
// Unseen does, not only when the key is listed.
func (v *view) rebandAll(now time.Time) {
	for _, s := range v.keys {
		v.reband(now, s)
	}
}

// takeBandChange reports whether a key crossed a band since the last call.
func (v *view) takeBandChange() bool {
	c := v.bandChanged
	v.bandChanged = false
	return c
}

// forget removes a node (its agent went away, or it hosts no more pods of
// the policy).
func (v *view) forget(node string) {
	n := v.nodes[node]
	if n == nil {
		return
	}
	delete(v.nodes, node)
	v.minDirOK = false
	v.subtract(time.Time{}, n, false)
}

// expire forgets every node whose last summary is older than maxAge. The
// unseen total is then rebuilt from the remaining nodes, so rounding error
// never accumulates across the view's life. (Bands: see rebandAll.)
func (v *view) expire(now time.Time, maxAge time.Duration) {
	for node, n := range v.nodes {
		if now.Sub(n.lastSeen) > maxAge {
			v.forget(node)
		}
	}
	v.unseen = agentlink.Rates{}
	for _, n := range v.nodes {
		v.unseen.Reads += n.unseen.Reads
		v.unseen.Writes += n.unseen.Writes
	}
}

// setExpected replaces the set of nodes that host pods of the policy. A
// node no longer expected is forgotten at once: its pods are gone.
func (v *view) setExpected(now time.Time, nodes map[string]bool) {
	for n := range v.expected {
		if !nodes[n] {
			delete(v.expected, n)
			v.forget(n)
		}
	}
	for n := range nodes {
		if _, ok := v.expected[n]; !ok {
			v.expected[n] = now
		}
	}
}

// heardFromAll reports whether every node expected to send (hosting the
// policy's pods) has sent a summary since since, and there is at least one.
func (v *view) heardFromAll(since time.Time) bool {
	if len(v.expected) == 0 {
		return false
	}
	for node := range v.expected {
		n := v.nodes[node]
		if n == nil || n.lastSeen.Before(since) {
			return false
		}
	}
	return true
}

// estimate is one key's rates as the manager knows them.
type estimate struct {
	lower, upper agentlink.Rates
	bytes        float64
	// exact: the key is pinned and every fresh node applied the pin, so
	// lower is the exact sum and upper equals it.
	exact bool
	// counted: the estimate is a sum of the nodes' counts, which decisions
	// may make a key hot on (decide.Observation.Bound): exact, or no node
	// bounds anything (Σ Unseen is zero). A key every node happens to list
	// is not counted until pinned: a key newly in a node's store reads high
	// until its span fills (its first count starts the span), and only a pin
	// keeps it listed by every node from one summary to the next.
	counted bool
}

// value is what decisions take: the exact sum when there is one, otherwise
// the upper bound.
func (e estimate) value() agentlink.Rates {
	if e.exact {
		return e.lower
	}
	return e.upper
}

// minDirective is the oldest directive applied by a node in the view; a pin
// made at or before it has reached every node that is sending.
func (v *view) minDirective() uint64 {
	if !v.minDirOK {
		v.minDir = math.MaxUint64
		for _, n := range v.nodes {
			v.minDir = min(v.minDir, n.directive)
		}
		v.minDirOK = true
	}
	return v.minDir
}

// estimate sums the nodes' rates. lower takes the larger of the sum of
// window averages and the sum of one-slot rates, exact or not. Each sum is
// unbiased (each node's average and one-slot rate are: see sketch.Item), so
// their larger reads high only by their noise: over a thousand nodes the
// one-slot sum of a counter at 880 writes/s varies by about √880 ≈ 30 (3 %),
// and the larger of the two read +0 to +2 % in TestSparseCounterCount.
// Taking the sum of averages alone once every node's span is full would
// be less noisy, but a pinned key (pinned because it is warm) that turns
// hot would then show only as its 10 s average catches up: the one-slot
// sum shows it within a slot, which the detection guarantee counts on.
func (v *view) estimate(s *keySum) estimate {
	e := estimate{
		lower: agentlink.Rates{Reads: max(s.reads, s.rreads, 0), Writes: max(s.writes, s.rwrites, 0)},
		bytes: max(s.bytes, 0),
	}
	e.upper = agentlink.Rates{
		Reads:  e.lower.Reads + max(v.unseen.Reads-s.unseenR, 0),
		Writes: e.lower.Writes + max(v.unseen.Writes-s.unseenW, 0),
	}
	// With no Unseen anywhere (every node's store holds every key it saw
	// and its floor is zero) there is no bound in any estimate.
	e.counted = v.unseen.Reads <= 0 && v.unseen.Writes <= 0
	if s.pin != 0 && s.pin <= v.minDirective() {
		e.exact, e.counted, e.upper = true, true, e.lower
	}
	return e
}

// Snapshot is a view's content at one moment, what a reconcile pass takes.
type Snapshot struct {
	// Aggregate is what the decisions take: per key the exact sum or the
	// upper bound, marked Bound (see view), fresh and stale node counts.
	decide.Aggregate
	// Estimates has each key's bounds, for status and the aggregated report.
	Estimates map[string]Estimate
	// Unseen is Σ Unseen over fresh nodes: the most any key can be
	// underestimated by (its upper bound exceeds its true rate by at most
	// this much). The guarantee holds while it stays below the threshold
	// (docs/node-agent.md).
	Unseen agentlink.Rates
	// Total is the policy's counted traffic over the fresh nodes.
	Total agentlink.Rates
	// Pinned counts pinned keys, Exact those whose pin every node applied.
	Pinned, Exact int
	// BigKeys are the largest keys by value size over the fresh nodes,
	// largest first (see bigKeys).
	BigKeys []agentlink.KeySize
}

// Estimate is one key's bounds.
type Estimate struct {
	Lower, Upper agentlink.Rates
	Bytes        float64
	Exact        bool
}

// snapshot computes the view at now; nodes silent for more than maxAge are
// not counted (expire forgets them) and grace is how long a node may be
// expected before its silence counts as stale.
func (v *view) snapshot(now time.Time, maxAge, grace time.Duration) Snapshot {
	snap := Snapshot{
		Aggregate: decide.Aggregate{Keys: make(map[string]decide.Observation, len(v.keys))},
		Estimates: make(map[string]Estimate, len(v.keys)),
		Unseen:    agentlink.Rates{Reads: max(v.unseen.Reads, 0), Writes: max(v.unseen.Writes, 0)},
		Pinned:    len(v.pins),
	}
	moved := map[string]*moveSums{}
	for k, s := range v.keys {
		e := v.estimate(s)
		val := e.value()
		snap.Keys[k] = decide.Observation{ReadsPerSecond: round(val.Reads), WritesPerSecond: round(val.Writes), Bound: !e.counted,
			Families: s.fams.families(), ReadsOverFor: overFor(s.overR, now), WritesOverFor: overFor(s.overW, now)}
		snap.Estimates[k] = Estimate{Lower: e.lower, Upper: e.upper, Bytes: e.bytes, Exact: e.exact}
		if e.exact {
			snap.Exact++
		}
	}
	for node, n := range v.nodes {
		if now.Sub(n.lastSeen) > maxAge {
			continue
		}
		snap.FreshNodes++
		snap.Total.Reads += n.total.Reads
		snap.Total.Writes += n.total.Writes
		if t := n.lastSeen.Add(maxAge).Add(time.Nanosecond); snap.NextStale.IsZero() || t.Before(snap.NextStale) {
			snap.NextStale = t
		}
		// Each fresh node's refusals of its last report interval, summed:
		// what the manager rolls a move back by.
		for _, kc := range n.refused {
			o := snap.Keys[kc.Key]
			o.Refused += int64(min(kc.Count, math.MaxInt64/2))
			snap.Keys[kc.Key] = o
		}
		// And the outcomes of the commands moves served, with their
		// baseline, over decide's windows: what the manager withdraws a
		// failing move by.
		addMoved(moved, n, v.moveInterval(), nil)
		_ = node
	}
	for k, m := range moved {
		o := snap.Keys[k]
		o.Moved, o.MovedReads, o.MovedOthers = m.histories()
		snap.Keys[k] = o
	}
	snap.BigKeys = v.bigKeys(now, maxAge)
	for node, since := range v.expected {
		if n := v.nodes[node]; n != nil && now.Sub(n.lastSeen) <= maxAge {
			continue
		}
		if now.Sub(since) >= grace {
			snap.StaleNodes++
		}
	}
	return snap
}

// famCounts counts the reporters of each family bit of a key.
type famCounts [routing.FamilyBits]int32

// add counts (n = 1) or uncounts (n = -1) one reporter's families.
func (c *famCounts) add(f routing.Families, n int32) {
	for f != 0 {
		i := bits.TrailingZeros32(uint32(f))
		c[i] += n
		f &^= 1 << i
	}
}

// families are the bits at least one reporter reports.
func (c *famCounts) families() routing.Families {
	var f routing.Families
	for i, n := range c {
		if n > 0 {
			f |= 1 << i
		}
	}
	return f
}

func round(f float64) int64 {
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(math.Round(f))
}

// band places a rate against a threshold with hysteresis h (a fraction): 0
// cold (below T·(1−h)), 1 warm, 2 hot (over T, as decide counts it).
func band(rate float64, threshold int64, h float64) int {
	t := float64(threshold)
	switch {
	case rate > t:
		return 2
	case rate >= t*(1-h):
		return 1
	}
	return 0
}

// pinCandidates chooses the keys to pin: the mitigated keys (their cooling
// must be measured exactly), then every key in the warm or hot band, hottest
// first, up to limit. A key already pinned stays while it is at least half
// way to the warm band, so pins do not churn around the band's edge.
func (v *view) pinCandidates(snap *Snapshot, mitigated []string, th Thresholds, limit int) []string {
	type cand struct {
		key  string
		heat float64
	}
	var cs []cand
	seen := map[string]bool{}
	for _, k := range mitigated {
		if !seen[k] {
			seen[k] = true
			cs = append(cs, cand{k, math.Inf(1)})
		}
	}
	for k, e := range snap.Estimates {
		if seen[k] {
			continue
		}
		val := e.Upper
		if e.Exact {
			val = e.Lower
		}
		heat := max(val.Reads/float64(max(th.Reads, 1)), val.Writes/float64(max(th.Writes, 1)))
		keep := heat >= 1-th.Hysteresis
		if _, pinned := v.pins[k]; pinned && heat >= (1-th.Hysteresis)/2 {
			keep = true
		}
		if keep {
			seen[k] = true
			cs = append(cs, cand{k, heat})
		}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if c := cmp.Compare(b.heat, a.heat); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	out := make([]string, 0, min(len(cs), limit))
	for _, c := range cs[:min(len(cs), limit)] {
		out = append(out, c.key)
	}
	slices.Sort(out)
	return out
}

// setPins replaces the pin set: keys already pinned keep their version, new
// ones take version. It reports whether the set changed.
func (v *view) setPins(keys []string, version uint64) bool {
	changed := len(keys) != len(v.pins)
	next := make(map[string]uint64, len(keys))
	for _, k := range keys {
		if pv, ok := v.pins[k]; ok {
			next[k] = pv
		} else {
			next[k] = version
			changed = true
		}
	}
	for k, ver := range next {
		if s := v.keys[k]; s != nil {
			s.pin = ver
		}
	}
	for k := range v.pins {
		if _, still := next[k]; !still {
			if s := v.keys[k]; s != nil {
				s.pin = 0
			}
		}
	}
	v.pins = next
	return changed
}

// Thresholds are what the hub needs of a policy's spec.
type Thresholds struct {
	Reads, Writes int64
	// Hysteresis is spec.thresholds.hysteresisPercent as a fraction.
	Hysteresis float64
}
