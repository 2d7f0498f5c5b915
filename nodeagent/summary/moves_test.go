package summary

import (
	"slices"
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
		if got := MovesUrgent(slices.Values([]agentlink.KeyMoved{{Key: "other", Served: 10}, c.m}), nil); got != c.want {
			t.Errorf("%+v among others: urgent %v, want %v", c.m, got, c.want)
		}
	}
}

// TestMoveUrgentWithRecent: failures since the last summary count with
// those of the summaries sent within the last report interval (the
// manager's shortest window), once: urgent when both together reach the
// rule and the recent ones alone did not (the manager has heard of those),
// and only with a failure not sent yet.
func TestMoveUrgentWithRecent(t *testing.T) {
	for _, c := range []struct {
		name           string
		unsent, recent agentlink.KeyMoved
		want           bool
	}{
		{"4 sent, the fifth now", agentlink.KeyMoved{Served: 1, Failed: 1, BaseTotal: 10}, agentlink.KeyMoved{Served: 20, Failed: 4, BaseTotal: 100}, true},
		{"5 sent, the sixth now", agentlink.KeyMoved{Served: 1, Failed: 1, BaseTotal: 10}, agentlink.KeyMoved{Served: 20, Failed: 5, BaseTotal: 100}, false},
		{"5 sent, 5 more now", agentlink.KeyMoved{Served: 5, Failed: 5, BaseTotal: 10}, agentlink.KeyMoved{Served: 20, Failed: 5, BaseTotal: 100}, true},
		{"4 sent, none failed since", agentlink.KeyMoved{Served: 10, BaseTotal: 10}, agentlink.KeyMoved{Served: 20, Failed: 4, BaseTotal: 100}, false},
		{"4 sent, one more now, the direct ones failing alike", agentlink.KeyMoved{Served: 1, Failed: 1, BaseTotal: 10, BaseFailed: 5}, agentlink.KeyMoved{Served: 20, Failed: 4, BaseTotal: 100, BaseFailed: 20}, false},
		{"reads apart: 4 reads sent, the fifth now", agentlink.KeyMoved{Served: 10, Failed: 1, ReadServed: 1, ReadFailed: 1, BaseTotal: 100, BaseReads: 50},
			agentlink.KeyMoved{Served: 1000, Failed: 4, ReadServed: 4, ReadFailed: 4, BaseTotal: 1000, BaseReads: 500}, true},
	} {
		if got := MoveUrgentWithRecent(&c.unsent, &c.recent); got != c.want {
			t.Errorf("%s: urgent %v, want %v", c.name, got, c.want)
		}
		c.unsent.Key, c.recent.Key = "k", "k"
		got := MovesUrgent(slices.Values([]agentlink.KeyMoved{c.unsent}), func(key string) agentlink.KeyMoved {
			if key != "k" {
				t.Fatalf("recent outcomes asked for %q", key)
			}
			return c.recent
		})
		if got != c.want {
			t.Errorf("%s, by MovesUrgent: urgent %v, want %v", c.name, got, c.want)
		}
	}
}
