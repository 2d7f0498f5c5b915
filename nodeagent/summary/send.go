package summary

import (
	"slices"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

// The send rule: when an agent's summary goes. It is the agent's, and the
// hub's fleet tests (controllers/hub fleet_test.go) run the same code for
// every simulated node, so a bias in when nodes send (the manager's exact
// counts are unbiased only if when a node sends does not depend on them:
// see Alerting) shows in the hub's counts and decisions there.
//
// An agent keeps one Schedule (one summary carries every policy) and one
// Sender per policy. At each tick, for each policy: Check, from the
// policy's items; then Schedule.Due on whether any policy's Check is
// urgent; if the summary goes, Sent for each policy and Schedule.Sent.

// Schedule is when the agent's last summary went.
type Schedule struct{ last time.Time }

// Reset makes the next summary due at once (a new manager: tell it now).
func (s *Schedule) Reset() { s.last = time.Time{} }

// Early reports whether a summary at now would come before the interval is
// up since the last one: only an urgent one goes then.
func (s *Schedule) Early(now time.Time, interval time.Duration) bool {
	return !s.last.IsZero() && now.Sub(s.last) < interval
}

// Due reports whether a summary is due at now (see Due).
func (s *Schedule) Due(now time.Time, interval, minGap time.Duration, urgent bool) bool {
	return Due(now, s.last, interval, minGap, urgent)
}

// Sent records that a summary went at now.
func (s *Schedule) Sent(now time.Time) { s.last = now }

// Sender is what an agent keeps of one policy between summaries to decide
// whether its next one is urgent and which directive it echoes: the keys
// it last sent (for Urgent), whether a directive newly pinned a key since
// (the manager counts a pinned key exactly only once every node's summary
// says it applied the pin, so the summary goes at once, once a batch has
// counted every pinned key since its pin, rather than at the interval),
// and when the follow-up of the summary that echoed a new pin is due
// (PinFollowUpAfter).
type Sender struct {
	sent    Sent
	newPins bool
	// pinGen counts the directives that pinned a key not pinned before,
	// so that Sent clears newPins only for the pins its summary echoed.
	pinGen uint64
	// version is the last directive applied; held, while newPins, the one
	// before the first new pin: what summaries echo until the pins are
	// counted (Check.Echo).
	version, held uint64
	followUp      time.Time // zero: none
}

// Pins applies directive version's pins to sk at now: unpins the keys it no
// longer lists, pins the ones it does, and makes the next summary urgent
// once the new ones are counted (pinEcho). The sketch's clock is brought
// to now first: a pin's moment bounds how long its echo waits for a batch
// (sketch.PinsCounted). It returns how many pins sk refused (see
// sketch.Pin).
func (s *Sender) Pins(sk *sketch.Sketch, pins []string, version uint64, now time.Time) (refused int) {
	sk.Advance(now)
	prev := s.version
	s.version = version
	pinned := sk.Pinned()
	for _, k := range pinned {
		if !slices.Contains(pins, k) {
			sk.Unpin(k)
		}
	}
	newPin := false
	for _, k := range pins {
		if !slices.Contains(pinned, k) {
			newPin = true
		}
		if !sk.Pin(k) {
			refused++
		}
	}
	if newPin {
		if !s.newPins {
			s.held = prev
		}
		s.newPins = true
		s.pinGen++
	}
	return refused
}

// Check is what Sender.Check decided of a policy's summary built at a
// tick; Sender.Sent takes it back if the summary goes.
type Check struct {
	// Urgent says the policy makes the summary urgent: a new pin echoed
	// (pinEcho), the pin's follow-up due, or a key newly alerting (Urgent).
	Urgent bool
	// Echo is the directive version the summary says the node applied:
	// the last one, or, while a new pin's counts are not in yet
	// (sketch.PinsCounted), the one before it. Every summary, urgent or
	// due by the interval, echoes only pins whose counts it carries: a
	// manager counts a pinned key exactly from the summaries that echo its
	// pin, and one that read a new pin's zero there unpinned the key (the
	// previous release's manager does so at once), which over and over
	// kept a hot key from ever being mitigated (test/skew
	// TestSkewPreviousManager).
	Echo     uint64
	at       time.Time
	gen      uint64
	wave     bool // the summary echoes a new pin, urgent or not
	followUp bool // the summary is the pin's follow-up
}

// Check decides whether the policy's summary at now, of items (the
// sketch's, all of them), is urgent, and which directive it echoes;
// pinsCounted is the sketch's PinsCounted.
func (s *Sender) Check(now time.Time, items []sketch.Item, alert agentlink.Rates, pinsCounted bool) Check {
	c := Check{at: now, gen: s.pinGen, Echo: s.version, wave: s.newPins && pinsCounted, followUp: s.FollowUpDue(now)}
	if s.newPins && !pinsCounted {
		c.Echo = s.held
	}
	c.Urgent = s.pinEcho(pinsCounted) || c.followUp || Urgent(&s.sent, items, alert)
	return c
}

// MayBeUrgent reports whether Check at now could say urgent, given the
// only items that can have become Alerting since the last look (those
// counted since, filtered by Alerting): a cheaper test for ticks where
// nothing else changed.
func (s *Sender) MayBeUrgent(now time.Time, alerting []sketch.Item, alert agentlink.Rates, pinsCounted bool) bool {
	return s.pinEcho(pinsCounted) || s.FollowUpDue(now) || (len(alerting) > 0 && Urgent(&s.sent, alerting, alert))
}

// pinEcho reports whether the summary must go now to echo a new pin: a
// directive pinned a key since the last summary, and every pinned key has
// been counted since its pin, by a batch or for a flush period
// (pinsCounted, sketch.PinsCounted): sent before, the new pin's exact rate
// would read zero while its traffic waits in the senders, and the manager
// unpins a key whose exact rate falls that low.
func (s *Sender) pinEcho(pinsCounted bool) bool { return s.newPins && pinsCounted }

// Pending reports whether the policy has a summary for its pins to send:
// a new pin's echo waiting for its counts (which time alone may make due:
// sketch.PinsCounted is bounded by a flush period), or the follow-up due.
// A tick with no new counts still checks it.
func (s *Sender) Pending(now time.Time) bool { return s.newPins || s.FollowUpDue(now) }

// FollowUpDue reports whether the summary after the one that echoed a new
// pin is due at now.
func (s *Sender) FollowUpDue(now time.Time) bool {
	return !s.followUp.IsZero() && !now.Before(s.followUp)
}

// Sent records that the summary c was checked for went, listing keys;
// interval is the agent's report interval. The new-pin mark stays until a
// summary echoes the pins (c.wave), and then only if no directive pinned
// another key between Check and Sent (the agent holds no lock between
// them): that one's echo is still to come.
func (s *Sender) Sent(c Check, keys []agentlink.KeyRates, interval time.Duration) {
	s.sent.Set(keys)
	if c.wave {
		// What it echoed is counted; a later new pin's echo waits.
		s.newPins, s.held = c.gen != s.pinGen, c.Echo
	}
	switch {
	case c.wave:
		s.followUp = c.at.Add(PinFollowUpAfter(interval))
	case c.followUp:
		s.followUp = time.Time{}
	}
}

// PinFollowUpAfter is how long after the summary that echoed a new pin the
// next one goes, at the latest: half the report interval. A pinned key's
// counts never make a summary urgent (Alerting: the manager's sum of them
// is unbiased only if when a node sends does not depend on them), so
// without it the manager's exact count of a key pinned as it turned hot
// would be the one of the pin's summaries, over a tick or two since the
// pin, until each node's interval: a key pinned while warm was seen over
// up to a report interval later. A second summary at a fixed time after
// the first depends on no count.
func PinFollowUpAfter(interval time.Duration) time.Duration { return interval / 2 }
