package nodeagent

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// TestExternalTicksTickOnlyWhenCalled: with Options.ExternalTicks the agent
// has no ticker of its own (the fleet simulator ticks each simulated node's
// agent from the node's goroutine), and each Tick is one turn of the
// summary loop, which summarises and sends to the manager as the agent's
// own ticker does.
func TestExternalTicksTickOnlyWhenCalled(t *testing.T) {
	h := startOpts(t, nil, func(o *Options) { o.ExternalTicks = true })
	for range 20 {
		h.clk.Step(DefaultTick)
	}
	if n := h.d.Stats().Ticks; n != 0 {
		t.Fatalf("the agent ticked %d times on its own clock, want none: its caller ticks it", n)
	}
	h.c.Observe(policy, "product:hot", 600, 0, 600*512) // listed in the summaries
	h.send()
	for range 20 { // two report intervals of ticks
		h.clk.Step(DefaultTick)
		h.d.Tick()
	}
	if n := h.d.Stats().Ticks; n != 20 {
		t.Fatalf("%d ticks after 20 calls of Tick, want 20", n)
	}
	eventually.True(t, 20*time.Second, "the summaries reach the manager", func() bool {
		return h.d.Stats().Summaries > 0 && h.reads("product:hot") > 0
	})
}

// TestExternalTicksFailingMoveSendsAtOnce: under Options.ExternalTicks a
// batch that makes a key's move fail clearly more than the direct commands
// still sends its summary at once (as TestFailingMoveSendsASummaryAtOnce
// with the agent's own ticker), not at the caller's next tick.
func TestExternalTicksFailingMoveSendsAtOnce(t *testing.T) {
	h := startOpts(t, nil, func(o *Options) { o.ExternalTicks = true })
	h.settle()
	sent := h.afterInterval()
	h.step() // a tick since that summary: an urgent one may go
	for range 5 {
		h.c.ObserveMoved(policy, "product:split", false, true)
	}
	for range 100 {
		h.c.ObserveRaw(policy, false, false)
	}
	h.send() // no tick from here on
	eventually.True(t, 20*time.Second, "the summary with the move's failures reaches the manager at once", func() bool {
		return h.d.Stats().Summaries > sent
	})
}
