package summary

import (
	"testing"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// TestMoveUrgent: a key's outcomes since the last summary make it urgent
// when MinUrgentMoveFailures of its reads, or of its other commands,
// failed on the move's path and their fraction is above the same kind of
// direct commands' by the manager's margin (twice, and one point more);
// never without direct commands beside them, nor when both fail alike.
// Outcomes that tell no reads are judged whole, among the others.
func TestMoveUrgent(t *testing.T) {
	for _, c := range []struct {
		m    agentlink.KeyMoved
		want bool
	}{
		{agentlink.KeyMoved{Served: 100, Failed: 5, BaseTotal: 100}, true},
		{agentlink.KeyMoved{Served: 100, Failed: 4, BaseTotal: 100}, false},                  // too few for the manager
		{agentlink.KeyMoved{Served: 5, Failed: 5}, false},                                    // no baseline
		{agentlink.KeyMoved{Served: 100, Failed: 50, BaseTotal: 100, BaseFailed: 50}, false}, // alike: a failover
		{agentlink.KeyMoved{Served: 100, Failed: 20, BaseTotal: 100, BaseFailed: 10}, false}, // twice, not more
		{agentlink.KeyMoved{Served: 100, Failed: 21, BaseTotal: 100, BaseFailed: 10}, true},
		{agentlink.KeyMoved{Served: 1000, Failed: 10, BaseTotal: 1000}, false}, // 1 %: one point, not more
		{agentlink.KeyMoved{Served: 1000, Failed: 11, BaseTotal: 1000}, true},
		// Reads apart: 5 of 5 reads failed against none of 500 direct
		// reads, though 5 of 1,000 commands whole is half a point.
		{agentlink.KeyMoved{Served: 1000, Failed: 5, BaseTotal: 1000, ReadServed: 5, ReadFailed: 5, BaseReads: 500}, true},
		// Writes failing alike on both paths (a failover's READONLY),
		// reads not: whole, 50 % against 10 %, but nothing apart.
		{agentlink.KeyMoved{Served: 100, Failed: 50, BaseTotal: 1000, BaseFailed: 100, ReadServed: 0, BaseReads: 900}, false},
	} {
		if got := MoveUrgent(&c.m); got != c.want {
			t.Errorf("%+v: urgent %v, want %v", c.m, got, c.want)
		}
		if got := MovesUrgent([]agentlink.KeyMoved{{Key: "other", Served: 10}, c.m}); got != c.want {
			t.Errorf("%+v among others: urgent %v, want %v", c.m, got, c.want)
		}
	}
}
