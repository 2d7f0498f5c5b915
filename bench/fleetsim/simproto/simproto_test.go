package simproto

import (
	"bufio"
	"bytes"
	"flag"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSpread(t *testing.T) {
	tests := map[string]struct {
		total    uint64
		n, next  int
		want     []uint64
		wantNext int
	}{
		"nothing":                {total: 0, n: 3, next: 1, want: []uint64{0, 0, 0}, wantNext: 1},
		"fewer than sidecars":    {total: 2, n: 5, next: 4, want: []uint64{1, 0, 0, 0, 1}, wantNext: 1},
		"exact multiple":         {total: 6, n: 3, next: 2, want: []uint64{2, 2, 2}, wantNext: 2},
		"remainder from next on": {total: 7, n: 3, next: 2, want: []uint64{2, 2, 3}, wantNext: 0},
		"remainder wraps":        {total: 8, n: 3, next: 2, want: []uint64{3, 2, 3}, wantNext: 1},
		"one sidecar":            {total: 5, n: 1, next: 0, want: []uint64{5}, wantNext: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := make([]uint64, tc.n)
			next := spread(tc.total, tc.n, tc.next, func(i int, c uint64) { got[i] += c })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
			if next != tc.wantNext {
				t.Errorf("next = %d, want %d", next, tc.wantNext)
			}
		})
	}
}

type counts struct{ reads, writes, bytes uint64 }

// recorder is a sidecar that records what it was told, by key.
type recorder struct {
	mu   sync.Mutex
	keys map[string]counts
}

func (r *recorder) Observe(_, key string, reads, writes, bytes uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]counts{}
	}
	c := r.keys[key]
	c.reads += uint64(reads)
	c.writes += uint64(writes)
	c.bytes += uint64(bytes)
	r.keys[key] = c
}

func TestShare(t *testing.T) {
	tests := map[string]struct {
		total uint64
		n     int
		want  []uint64
	}{
		"none":           {total: 0, n: 3, want: []uint64{0, 0, 0}},
		"fewer than n":   {total: 2, n: 4, want: []uint64{1, 1, 0, 0}},
		"exact multiple": {total: 6, n: 3, want: []uint64{2, 2, 2}},
		"remainder":      {total: 7, n: 3, want: []uint64{3, 2, 2}},
		"one node":       {total: 5, n: 1, want: []uint64{5}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := make([]uint64, tc.n)
			for i := range got {
				got[i] = share(tc.total, i, tc.n)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodesSpreadEvenly: however the nodes' ticks interleave, the viral key
// and the counter reach every sidecar of the fleet within one operation of
// each other, and the totals are exactly the rates times the elapsed time.
func TestNodesSpreadEvenly(t *testing.T) {
	c := Defaults()
	c.Nodes, c.SidecarsPerNode = 7, 3
	c.ViralRate, c.CounterRate, c.BackgroundRate = 1000, 130, 500
	rs := make([]*recorder, c.Sidecars())
	obs := make([]Observer, len(rs))
	for i := range rs {
		rs[i] = &recorder{}
		obs[i] = rs[i]
	}
	keys := backgroundKeys(c.BackgroundKeys)
	gens := make([]*nodeTraffic, c.Nodes)
	for i := range gens {
		gens[i] = newNodeTraffic(&c, i, obs[i*c.SidecarsPerNode:(i+1)*c.SidecarsPerNode], keys)
	}
	for step := 1; step <= 100; step++ {
		hot := time.Duration(step) * 13 * time.Millisecond
		for _, g := range gens {
			g.advance(time.Second+hot, hot)
		}
		for _, key := range []string{c.ViralKey, c.CounterKey} {
			lo, hi, sum := uint64(1<<63), uint64(0), uint64(0)
			for _, r := range rs {
				v := r.keys[key].reads + r.keys[key].writes
				lo, hi, sum = min(lo, v), max(hi, v), sum+v
			}
			if hi-lo > 1 {
				t.Fatalf("step %d: %s spread unevenly: %d..%d per sidecar", step, key, lo, hi)
			}
			want := owed(c.ViralRate, hot)
			if key == c.CounterKey {
				want = owed(c.CounterRate, hot)
			}
			if sum != want {
				t.Fatalf("step %d: %s total %d, want %d", step, key, sum, want)
			}
		}
	}
	var bg, reads, writes uint64
	for _, r := range rs {
		for k, v := range r.keys {
			if strings.HasPrefix(k, "bg:") {
				bg += v.reads + v.writes
			}
		}
	}
	for _, g := range gens {
		reads, writes = reads+g.stats.BackgroundReads, writes+g.stats.BackgroundWrites
	}
	if want := owed(c.BackgroundRate, time.Second+1300*time.Millisecond); bg != want || reads+writes != want {
		t.Errorf("background total %d (stats %d), want %d", bg, reads+writes, want)
	}
	if writes == 0 || reads <= writes {
		t.Errorf("background reads/writes %d/%d, want mostly reads and some writes", reads, writes)
	}
}

// TestRunPhases: Run announces the three phases in order and offers the hot
// traffic only in the hot phase, all of it.
func TestRunPhases(t *testing.T) {
	c := Defaults()
	c.Nodes, c.SidecarsPerNode = 2, 2
	c.HotStart, c.HotDuration, c.Duration = 50*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
	r := &recorder{}
	obs := []Observer{r, r, r, r}
	var phases []string
	var ticks [2]atomic.Int64
	st, err := RunNodes(t.Context(), &c, obs, time.Now(), func(p string, _ time.Time) { phases = append(phases, p) },
		func(node int) { ticks[node].Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	for i := range ticks {
		// 200 ms of 100 ms ticks, and a last call after the final hand-out.
		if n := ticks[i].Load(); n < 3 {
			t.Errorf("node %d: afterTick called %d times, want one per tick and one at the end (at least 3)", i, n)
		}
	}
	if diff := cmp.Diff([]string{PhaseWarmup, PhaseHot, PhaseRest}, phases); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}
	if want := owed(c.ViralRate, c.HotDuration); st.ViralReads != want || r.keys[c.ViralKey].reads != want {
		t.Errorf("viral reads: stats %d, seen %d, want %d", st.ViralReads, r.keys[c.ViralKey].reads, want)
	}
	if want := owed(c.CounterRate, c.HotDuration); st.CounterWrites != want {
		t.Errorf("counter writes %d, want %d", st.CounterWrites, want)
	}
}

func TestRunRefusesWrongSidecarCount(t *testing.T) {
	c := Defaults()
	c.Nodes, c.SidecarsPerNode = 2, 2
	if _, err := Run(t.Context(), &c, []Observer{&recorder{}}, time.Now(), func(string, time.Time) {}); err == nil {
		t.Error("Run accepted 1 sidecar for 2 nodes of 2")
	}
}

func TestWriterLinesParse(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	at := time.Unix(1_800_000_000, 5)
	w.Progress(at, map[string]float64{"sidecars_synced": 3, "nodes_up": 2, "bad": 1 / zero()})
	w.Ready(at)
	w.Phase(PhaseHot, at)
	w.Routing(3, 9, 7, []string{"a", "b\"c"}, at)
	w.Routing(4, 0, 7, []string{"a", "b\"c"}, at)
	w.Routing(4, 1, 8, nil, at)
	w.AgentRouting(4, 2, 8, at)
	w.Error(at, "not ready: 2/3")
	w.Done(at, map[string]float64{"viral_reads": 1e6})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var got []Event
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		e, err := ParseEvent(sc.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		got = append(got, e)
	}
	ns := at.UnixNano()
	want := []Event{
		{Event: EventProgress, At: ns, Stats: map[string]float64{"sidecars_synced": 3, "nodes_up": 2}},
		{Event: EventReady, At: ns},
		{Event: EventPhase, At: ns, Phase: PhaseHot},
		{Event: EventRouting, At: ns, Node: 3, Sidecar: 9, Version: 7, Keys: []string{"a", "b\"c"}},
		{Event: EventRouting, At: ns, Node: 4, Sidecar: 0, Version: 7},
		{Event: EventRouting, At: ns, Node: 4, Sidecar: 1, Version: 8, Keys: []string{}},
		{Event: EventAgentRouting, At: ns, Node: 4, Policy: 2, Version: 8},
		{Event: EventError, At: ns, Message: "not ready: 2/3"},
		{Event: EventDone, At: ns, Stats: map[string]float64{"viral_reads": 1e6}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func zero() float64 { return 0 }

func TestParseEventRefuses(t *testing.T) {
	tests := map[string]string{
		"not JSON":          `{"event":`,
		"unknown event":     `{"event":"hello","at":1}`,
		"no time":           `{"event":"ready"}`,
		"unknown phase":     `{"event":"phase","phase":"lunch","at":1}`,
		"routing no node":   `{"event":"routing","sidecar":1,"version":2,"at":1}`,
		"routing version 0": `{"event":"routing","node":1,"sidecar":1,"version":0,"at":1}`,
		"negative sidecar":  `{"event":"routing","node":1,"sidecar":-2,"version":3,"at":1}`,
		"agent no policy":   `{"event":"agentRouting","node":1,"version":3,"at":1}`,
		"agent no node":     `{"event":"agentRouting","policy":0,"version":3,"at":1}`,
		"agent version 0":   `{"event":"agentRouting","node":1,"policy":0,"version":0,"at":1}`,
	}
	for name, line := range tests {
		t.Run(name, func(t *testing.T) {
			if e, err := ParseEvent([]byte(line)); err == nil {
				t.Errorf("ParseEvent(%s) = %+v, want an error", line, e)
			}
		})
	}
}

func TestConfigArgsRoundTrip(t *testing.T) {
	want := Defaults()
	want.Nodes, want.Kubeconfig, want.ManagerFleet, want.Token = 1000, "/tmp/kc", "127.0.0.1:9444", "tok"
	want.ViralRate, want.HotStart = 12345.5, 7*time.Second
	got := Defaults()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	got.Bind(fs)
	if err := fs.Parse(want.Args()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config after Args and Bind (-want +got):\n%s", diff)
	}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		change func(c *Config)
		want   string // substring of the error; empty for valid
	}{
		"defaults":                            {change: func(*Config) {}},
		"no nodes":                            {change: func(c *Config) { c.Nodes = 0 }, want: "--nodes"},
		"too many sidecars":                   {change: func(c *Config) { c.SidecarsPerNode = 251 }, want: "--sidecars-per-node"},
		"hot past the end":                    {change: func(c *Config) { c.HotStart = c.Duration }, want: "phases"},
		"unbounded rate":                      {change: func(c *Config) { c.ViralRate = 2e6 }, want: "--viral-rate"},
		"same keys":                           {change: func(c *Config) { c.CounterKey = c.ViralKey }, want: "two different"},
		"zipf exponent":                       {change: func(c *Config) { c.ZipfS = 1 }, want: "--zipf-s"},
		"duration over a hour":                {change: func(c *Config) { c.Duration = 2 * time.Hour }, want: "--duration"},
		"ten policies":                        {change: func(c *Config) { c.Policies = 10 }},
		"no policy":                           {change: func(c *Config) { c.Policies = 0 }, want: "--policies"},
		"a policy without sidecars on a node": {change: func(c *Config) { c.Policies = 11 }, want: "--policies"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := Defaults()
			tc.change(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error about %s", err, tc.want)
			}
		})
	}
}

func TestAddressesDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 255, 256, 999, MaxNodes - 1} {
		for _, j := range []int{0, 9, MaxSidecarsPerNode - 1} {
			ip := SidecarIP(i, j)
			if seen[ip] || !strings.HasPrefix(ip, "127.") || ip == "127.0.0.1" {
				t.Errorf("SidecarIP(%d, %d) = %s: repeated or not a loopback sidecar address", i, j, ip)
			}
			seen[ip] = true
		}
		if ip := NodeIP(i); seen[ip] || !strings.HasPrefix(ip, "127.") {
			t.Errorf("NodeIP(%d) = %s: repeated or not loopback", i, ip)
		} else {
			seen[ip] = true
		}
	}
}

func TestScheduleElapsed(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	tests := map[string]struct {
		hot            float64 // seconds after start; 0: not yet
		now            float64
		wantBG, wantHT time.Duration
	}{
		"warm-up":         {now: 4, wantBG: 4 * time.Second},
		"hot event":       {hot: 10, now: 12.5, wantBG: 12500 * time.Millisecond, wantHT: 2500 * time.Millisecond},
		"rest, unseen":    {hot: 10, now: 35, wantBG: 30 * time.Second, wantHT: 20 * time.Second},
		"exactly the end": {hot: 10, now: 30, wantBG: 30 * time.Second, wantHT: 20 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := schedule{hotDuration: 20 * time.Second}
			if tc.hot != 0 {
				s.hot.Store(at(tc.hot).UnixNano())
			}
			bg, hot := s.elapsed(start, at(tc.now))
			if bg != tc.wantBG || hot != tc.wantHT {
				t.Errorf("elapsed = %s, %s; want %s, %s", bg, hot, tc.wantBG, tc.wantHT)
			}
		})
	}
}

// policyRecorder records which policies a sidecar counted under.
type policyRecorder struct {
	policies map[string]bool
	hot      map[string]uint64 // key → reads + writes
}

func (r *policyRecorder) Observe(policy, key string, reads, writes, _ uint32) {
	r.policies[policy] = true
	if !strings.HasPrefix(key, "bg:") {
		r.hot[policy+" "+key] += uint64(reads) + uint64(writes)
	}
}

// TestPoliciesEachWithTheirOwnHotKeys: with several policies, sidecar j of
// every node counts only under policy j mod Policies, and each policy's
// viral key and counter go, at the full rates, to that policy's sidecars
// only, evenly.
func TestPoliciesEachWithTheirOwnHotKeys(t *testing.T) {
	c := Defaults()
	c.Nodes, c.SidecarsPerNode, c.Policies = 5, 6, 3
	c.ViralRate, c.CounterRate = 900, 120
	rs := make([]*policyRecorder, c.Sidecars())
	obs := make([]Observer, len(rs))
	for i := range rs {
		rs[i] = &policyRecorder{policies: map[string]bool{}, hot: map[string]uint64{}}
		obs[i] = rs[i]
	}
	keys := backgroundKeys(c.BackgroundKeys)
	for i := range c.Nodes {
		g := newNodeTraffic(&c, i, obs[i*c.SidecarsPerNode:(i+1)*c.SidecarsPerNode], keys)
		g.advance(3*time.Second, time.Second)
	}
	for k := range c.Policies {
		ref := c.PolicyRefOf(k)
		for _, key := range []string{c.ViralKeyOf(k), c.CounterKeyOf(k)} {
			want := owed(c.ViralRate, time.Second)
			if key == c.CounterKeyOf(k) {
				want = owed(c.CounterRate, time.Second)
			}
			lo, hi, sum := uint64(1<<63), uint64(0), uint64(0)
			for s, r := range rs {
				v := r.hot[ref+" "+key]
				if c.SidecarPolicy(s%c.SidecarsPerNode) != k {
					if v != 0 {
						t.Errorf("sidecar %d (policy %d) got %d of policy %d's %s", s, c.SidecarPolicy(s%c.SidecarsPerNode), v, k, key)
					}
					continue
				}
				lo, hi, sum = min(lo, v), max(hi, v), sum+v
			}
			if sum != want || hi-lo > 1 {
				t.Errorf("policy %d's %s: total %d (want %d), per sidecar %d..%d", k, key, sum, want, lo, hi)
			}
		}
	}
	for s, r := range rs {
		want := map[string]bool{c.PolicyRefOf(c.SidecarPolicy(s % c.SidecarsPerNode)): true}
		if diff := cmp.Diff(want, r.policies); diff != "" {
			t.Errorf("sidecar %d counted under (-want +got):\n%s", s, diff)
		}
	}
	if c.PolicyName(0) != c.Policy || c.PolicyName(2) != c.Policy+"-3" || c.ViralKeyOf(0) != c.ViralKey || c.ViralKeyOf(1) == c.ViralKey {
		t.Errorf("names: %q %q %q %q", c.PolicyName(0), c.PolicyName(2), c.ViralKeyOf(0), c.ViralKeyOf(1))
	}
}
