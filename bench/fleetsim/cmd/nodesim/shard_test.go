package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
)

// TestNodesPerProcess: a member's nodes fit its open-files limit as
// descriptorsNeeded counts them, and one more would not.
func TestNodesPerProcess(t *testing.T) {
	for _, tr := range []string{transportDirect, transportUDP} {
		n := nodesPerProcess(20000, tr, 10)
		fits := func(nodes int) bool {
			return descriptorsNeeded(simproto.Config{Nodes: nodes, SidecarsPerNode: 10}, tr) <= 20000
		}
		if n < 1 || !fits(n) || fits(n+1) {
			t.Errorf("%s: %d nodes per process at 20,000 files; want the most that fit", tr, n)
		}
	}
	if n := nodesPerProcess(100, transportDirect, 10); n != 0 {
		t.Errorf("a limit under the margin: %d nodes, want 0", n)
	}
}

func TestSplitNodes(t *testing.T) {
	tests := map[string]struct {
		nodes, per, processes int
		want                  []simproto.Range
		wantErr               string
	}{
		"fits one":              {nodes: 1000, per: 1410, want: []simproto.Range{{First: 0, Count: 1000}}},
		"5,000 at 1,410 a time": {nodes: 5000, per: 1410, want: []simproto.Range{{First: 0, Count: 1250}, {First: 1250, Count: 1250}, {First: 2500, Count: 1250}, {First: 3750, Count: 1250}}},
		"uneven":                {nodes: 7, per: 3, want: []simproto.Range{{First: 0, Count: 3}, {First: 3, Count: 2}, {First: 5, Count: 2}}},
		"more asked":            {nodes: 10, per: 100, processes: 3, want: []simproto.Range{{First: 0, Count: 4}, {First: 4, Count: 3}, {First: 7, Count: 3}}},
		"fewer than needed":     {nodes: 5000, per: 1410, processes: 2, wantErr: "at least 4 processes"},
		"more than nodes":       {nodes: 2, per: 10, processes: 3, wantErr: "at most one per node"},
		"no room":               {nodes: 2, per: 0, wantErr: "no node"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := splitNodes(tc.nodes, tc.per, tc.processes)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ranges (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMergeStats: counts add up; maxima, lag quantiles and the start-up
// are the worst member's.
func TestMergeStats(t *testing.T) {
	got := mergeStats([]map[string]float64{
		{"agent_summaries_sent": 10, "max_tick_gap_seconds": 0.2, "node_tick_lag_p99_seconds": 0.01, "node_tick_lag_max_seconds": 0.3,
			"node_tick_lag_samples": 100, "follower_timer_lag_p50_seconds": 0.001, "startup_seconds": 12},
		{"agent_summaries_sent": 5, "max_tick_gap_seconds": 0.1, "node_tick_lag_p99_seconds": 0.05, "node_tick_lag_max_seconds": 0.2,
			"node_tick_lag_samples": 50, "follower_timer_lag_p50_seconds": 0.002, "startup_seconds": 10},
		nil,
	})
	want := map[string]float64{"agent_summaries_sent": 15, "max_tick_gap_seconds": 0.2, "node_tick_lag_p99_seconds": 0.05,
		"node_tick_lag_max_seconds": 0.3, "node_tick_lag_samples": 150, "follower_timer_lag_p50_seconds": 0.002, "startup_seconds": 12}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mergeStats (-want +got):\n%s", diff)
	}
}

func TestReadStart(t *testing.T) {
	at := time.Unix(0, 1_700_000_000_123_456_789)
	got, err := readStart(strings.NewReader("start 1700000000123456789\n"))
	if err != nil || !got.Equal(at) {
		t.Errorf("readStart = %v, %v; want %v", got, err, at)
	}
	for _, bad := range []string{"", "start\n", "go 1\n", "start x\n"} {
		if _, err := readStart(strings.NewReader(bad)); err == nil {
			t.Errorf("readStart(%q): want an error", bad)
		}
	}
}

// TestMemberArgs: a member runs its range at its share of the fleet's
// start rate and start window, with the run's own flags.
func TestMemberArgs(t *testing.T) {
	c := simproto.Defaults()
	c.Nodes, c.ManagerFleet, c.Token = 5000, "127.0.0.1:1", "t"
	co := &coordinator{c: c, o: &options{startRate: 500, startWindow: 200, transport: transportDirect}}
	c2, o, err := parseFlags(co.memberArgs(simproto.Range{First: 1250, Count: 1250}, 4))
	if err != nil {
		t.Fatal(err)
	}
	if o.nodes(c2) != (simproto.Range{First: 1250, Count: 1250}) || o.startRate != 125 || c2.Nodes != 5000 || c2.Token != "t" {
		t.Errorf("member: range %+v, start rate %g, nodes %d, token %q; want 1250 from 1250, 125/s, 5000, t", o.nodes(c2), o.startRate, c2.Nodes, c2.Token)
	}
	if o.startWindow != 50 {
		t.Errorf("member: start window %d, want 50 (the fleet's 200 over 4)", o.startWindow)
	}
}
