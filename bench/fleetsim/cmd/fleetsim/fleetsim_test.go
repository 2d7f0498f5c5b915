package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
)

func TestParseStat(t *testing.T) {
	tests := map[string]struct {
		line    string
		want    procStat
		wantErr bool
	}{
		"kube-apiserver": {
			line: "4242 (kube-apiserver) S 4000 4242 4000 0 -1 4194560 123 0 0 0 1234 567 0 0 20 0 12 0 100 0 0",
			want: procStat{comm: "kube-apiserver", ppid: 4000, cpuSeconds: 18.01},
		},
		"spaces and parentheses in the name": {
			line: "7 (a (b) c) R 1 7 1 0 -1 0 0 0 0 0 50 50 0 0 20 0 1 0 1 0 0",
			want: procStat{comm: "a (b) c", ppid: 1, cpuSeconds: 1},
		},
		"waited-for children's time": {
			line: "9 (nodesim) S 1 9 1 0 -1 0 0 0 0 0 100 50 30 20 20 0 1 0 1 0 0",
			want: procStat{comm: "nodesim", ppid: 1, cpuSeconds: 1.5, childCPUSeconds: 0.5},
		},
		"children's time not a number": {line: "9 (x) S 1 9 1 0 -1 0 0 0 0 0 100 50 x 20 20", wantErr: true},
		"truncated":                    {line: "7 (x) R 1 7", wantErr: true},
		"no name":                      {line: "7 x R 1", wantErr: true},
		"not a number":                 {line: "7 (x) R one 7 1 0 -1 0 0 0 0 0 50 50", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseStat(tc.line)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat() error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(procStat{}), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("parseStat() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	tests := map[string]struct {
		text    string
		want    memStatus
		wantErr bool
	}{
		"both":       {text: "Name:\tetcd\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t9\n", want: memStatus{rss: 1 << 20, peak: 2 << 20}},
		"zombie":     {text: "Name:\tx\nState:\tZ (zombie)\n", wantErr: true},
		"odd unit":   {text: "VmHWM:\t2 MB\nVmRSS:\t1 kB\n", wantErr: true},
		"not number": {text: "VmHWM:\tx kB\nVmRSS:\t1 kB\n", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseStatus(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStatus() error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseStatus() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

const metricsText = `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="heatsink.dev",resource="hotkeyreports",scope="resource",subresource="",verb="PATCH",version="v1alpha1"} 100
apiserver_request_total{code="409",component="apiserver",dry_run="",group="heatsink.dev",resource="hotkeyreports",scope="resource",subresource="",verb="PATCH",version="v1alpha1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="heatsink.dev",resource="hotkeypolicies",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 20
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 3
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="",resource="configmaps",version="v1"} 1000
# TYPE apiserver_watch_events_sizes histogram
apiserver_watch_events_sizes_bucket{group="",resource="configmaps",version="v1",le="+Inf"} 1000
apiserver_watch_events_sizes_sum{group="",resource="configmaps",version="v1"} 2.048e+06
apiserver_watch_events_sizes_count{group="",resource="configmaps",version="v1"} 1000
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="WATCH",version="v1"} 1001
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 0
`

func TestParseAPIMetricsAndRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a, err := parseAPIMetrics(strings.NewReader(metricsText), t0)
	if err != nil {
		t.Fatal(err)
	}
	wantReq := map[string]float64{"PATCH hotkeyreports": 104, "PATCH hotkeypolicies/status": 10, "PUT leases": 20, "LIST configmaps": 7}
	if diff := cmp.Diff(wantReq, a.requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"WATCH configmaps": 1001}, a.longRunning); diff != "" {
		t.Errorf("long-running (-want +got):\n%s", diff)
	}
	later := strings.NewReplacer(`"PATCH",version="v1alpha1"} 100`, `"PATCH",version="v1alpha1"} 120`,
		`"PUT",version="v1"} 20`, `"PUT",version="v1"} 22`,
		`version="v1"} 1000`, `version="v1"} 1500`,
		`2.048e+06`, `3.072e+06`).Replace(metricsText)
	b, err := parseAPIMetrics(strings.NewReader(later), t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := rates(a, b)
	want := APIRates{
		Seconds:         10,
		Requests:        map[string]float64{"PATCH hotkeyreports": 2, "PUT leases": 0.2},
		Total:           2.2,
		Mutating:        2.2,
		MutatingLeases:  0.2,
		WatchEvents:     map[string]float64{"configmaps": 50},
		WatchBytes:      map[string]float64{"configmaps": 102.4 * 1000},
		WatchEventTotal: 50,
		WatchByteTotal:  102.4 * 1000,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("rates (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"PATCH hotkeyreports 2.00", "PUT leases 0.20"}, topRequests(got.Requests, 8)); diff != "" {
		t.Errorf("topRequests (-want +got):\n%s", diff)
	}
}

func TestParseAPIMetricsRefusesGarbage(t *testing.T) {
	if _, err := parseAPIMetrics(strings.NewReader("apiserver_request_total{verb=\"GET\" 1\n"), time.Now()); err == nil {
		t.Error("parseAPIMetrics accepted a broken line")
	}
}

func TestDetectAndFanOut(t *testing.T) {
	t0 := time.Unix(5000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	versions := []seenVersion{
		{Version: 1, At: at(-60000), Keys: []string{}},
		{Version: 2, At: at(1500), Keys: []string{"viral"}},
		{Version: 3, At: at(2500), Keys: []string{"counter", "viral"}},
	}
	events := []sidecarEvent{
		{sidecar: 0, version: 1, at: at(-59990)},
		{sidecar: 1, version: 1, at: at(-59900)},
		{sidecar: 0, version: 2, at: at(1510)},
		{sidecar: 1, version: 2, at: at(1600)},
		{sidecar: 0, version: 3, at: at(2490)}, // before the orchestrator saw it
		{sidecar: 1, version: 3, at: at(2700)},
		{sidecar: 2, version: 3, at: at(3000)}, // skipped version 2
		{sidecar: 2, version: 9, at: at(3000)}, // never in the ConfigMap
	}
	tests := map[string]struct {
		key  string
		want Detection
	}{
		"viral":   {key: "viral", want: Detection{Detected: true, Seconds: 1.5, Version: 2, SidecarsReached: 3, SidecarsP50: 1.6, SidecarsP99: 3}},
		"counter": {key: "counter", want: Detection{Detected: true, Seconds: 2.5, Version: 3, SidecarsReached: 3, SidecarsP50: 2.7, SidecarsP99: 3}},
		"never":   {key: "other", want: Detection{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := detect(versions, tc.key, t0, events)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("detect (-want +got):\n%s", diff)
			}
		})
	}
	got := fanOut(versions, at(0), time.Time{}, events)
	want := FanOut{Versions: 2, Samples: 5, P50Ms: 100, P99Ms: 500, MaxMs: 500, LastVersion: 3, LastReached: 3, Unmatched: 1}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("fanOut (-want +got):\n%s", diff)
	}
	got = fanOut(versions, at(0), at(2000), events) // version 3 after the end
	want = FanOut{Versions: 1, Samples: 2, P50Ms: 10, P99Ms: 100, MaxMs: 100, LastVersion: 2, LastReached: 2, Unmatched: 1}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("fanOut until 2 s (-want +got):\n%s", diff)
	}
}

func TestPercentile(t *testing.T) {
	tests := map[string]struct {
		sorted []float64
		q      float64
		want   float64
	}{
		"empty":        {sorted: nil, q: 0.5, want: 0},
		"one":          {sorted: []float64{7}, q: 0.99, want: 7},
		"median odd":   {sorted: []float64{1, 2, 3}, q: 0.5, want: 2},
		"p99 of 100":   {sorted: seq(100), q: 0.99, want: 99},
		"p99 of 1000":  {sorted: seq(1000), q: 0.99, want: 990},
		"p50 of even":  {sorted: []float64{1, 2, 3, 4}, q: 0.5, want: 2},
		"max quantile": {sorted: []float64{1, 2}, q: 1, want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.q); got != tc.want {
				t.Errorf("percentile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func seq(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(i + 1)
	}
	return s
}

func TestExpand(t *testing.T) {
	got := expand([]string{"--fleet-bind-address={fleetAddr}", "--token-file={tokenFile}", "{token}{token}", "plain"},
		map[string]string{"fleetAddr": "127.0.0.1:9", "tokenFile": "/t", "token": "ab"})
	want := []string{"--fleet-bind-address=127.0.0.1:9", "--token-file=/t", "abab", "plain"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("expand (-want +got):\n%s", diff)
	}
}

func TestRow(t *testing.T) {
	r := &Result{
		Design: "legacy", Nodes: 100, Sidecars: 1000, Reached: "done", StartupSeconds: 11,
		Viral:   Detection{},
		Counter: Detection{Detected: true, Seconds: 1.5, Version: 2},
		API: map[string]APIRates{
			"hot":    {Total: 12, Mutating: 3.5, MutatingLeases: 0.6, WatchEventTotal: 40, WatchByteTotal: 3 << 20},
			"rest":   {Mutating: 0.6, MutatingLeases: 0.6},
			"steady": {Mutating: 0.5, MutatingLeases: 0.5},
		},
		FanOut:    FanOut{Samples: 10, P50Ms: 4, P99Ms: 30, MaxMs: 41, LastVersion: 2, LastReached: 1000},
		Processes: map[string]*ProcStats{"manager": {CPUPhases: 1.25, PeakRSSMB: 51.6}},
		Stats: map[string]float64{"node_tick_lag_p99_seconds": 0.002, "node_tick_lag_max_seconds": 0.04,
			"follower_timer_lag_p99_seconds": 0.001, "follower_timer_lag_max_seconds": 0.009},
		Load: map[string]float64{"hot": 3.21},
	}
	r.Probe, r.ProbeSidecars = &FanOut{Samples: 1000, P50Ms: 7, P99Ms: 90, MaxMs: 120, LastReached: 1000}, 1000
	want := "| legacy | 100 | 1000 | all phases (start-up 11 s) | **never** | 1.50 s (v2) | 12 | 0.50 (0.50) | 3.50 (0.60) | 0.60 (0.60) | 40 / 3.0 MiB/s | — | hot: 4 / 30 / 41 ms (last version at 1000/1000); probe: 7 / 90 / 120 ms (1000/1000) | — | 1.2 s / 52 MiB | — | — | — | ticks 2 / 40 ms; followers 1 / 9 ms (load 3.2) |"
	if got := row(r); got != want {
		t.Errorf("row:\n got %s\nwant %s", got, want)
	}
	// Several policies: the design says so, detection counts keys.
	r = &Result{Design: "fleet", Nodes: 1000, Policies: 10, Sidecars: 10000, Reached: "done",
		Viral:       Detection{Detected: true, Seconds: 2.25, Version: 3, Of: 10, Count: 10, SidecarsReached: 10000, SidecarsP50: 2.5, SidecarsP99: 3},
		Counter:     Detection{Of: 10, Count: 7, Seconds: 2},
		API:         map[string]APIRates{"hot": {Total: 30, Mutating: 8, MutatingLeases: 0.6}},
		AgentFanOut: FanOut{Samples: 3000, P50Ms: 20, P99Ms: 80, MaxMs: 95, LastVersion: 4, LastReached: 1000},
		AgentProbe:  &FanOut{Samples: 999, P50Ms: 11, P99Ms: 40, MaxMs: 52, LastReached: 999},
		Stats:       map[string]float64{"node_tick_lag_p99_seconds": 0.45, "node_tick_lag_max_seconds": 2.1}}
	want = "| fleet, 10 policies | 1000 | 10000 | all phases | 10/10 keys, the last 2.25 s | **7/10 keys** | 30 | — | 8.00 (0.60) | — | 0 / 0 B/s | hot: 20 / 80 / 95 ms (last version at 1000/1000); probe: 11 / 40 / 52 ms (999/1000) | — | 2.50 / 3.00 s (10000/10000) | — | — | — | — | **behind**: ticks 450 / 2100 ms |"
	if got := row(r); got != want {
		t.Errorf("row with policies:\n got %s\nwant %s", got, want)
	}
	r = &Result{Design: "legacy", Nodes: 1000, Sidecars: 10000, Reached: "node simulator start-up",
		Progress:  map[string]float64{"nodes": 1000, "nodes_tracking": 1000, "sidecars": 10000, "sidecars_synced": 9174},
		Processes: map[string]*ProcStats{"manager": {CPUTotal: 3, PeakRSSMB: 51}}}
	got := row(r)
	for _, want := range []string{"| node simulator start-up (1000/1000 nodes, 9174/10000 sidecars synced) | — | — |", "| 3.0 s in all / 51 MiB |"} {
		if !strings.Contains(got, want) {
			t.Errorf("row of a run that never got ready: %s\nwant it to hold %s", got, want)
		}
	}
}

// TestEventStoreKeepsAgentRouting: agentRouting lines are kept by policy,
// with the node as the sample's index, apart from the sidecars' lines, and
// neither wakes the run loop.
func TestEventStoreKeepsAgentRouting(t *testing.T) {
	s := &eventStore{spn: 10, notify: make(chan simproto.Event, 8)}
	s.read(strings.NewReader(`{"event":"agentRouting","node":7,"policy":1,"version":3,"at":100}
{"event":"routing","node":7,"sidecar":1,"version":3,"at":150,"keys":["k"]}
{"event":"agentRouting","node":2,"policy":0,"version":5,"at":120}
{"event":"agentRouting","node":2,"version":5,"at":120}
{"event":"ready","at":200}
`))
	want := map[int][]sidecarEvent{
		1: {{sidecar: 7, version: 3, at: time.Unix(0, 100)}},
		0: {{sidecar: 2, version: 5, at: time.Unix(0, 120)}},
	}
	if diff := cmp.Diff(want, s.agents, cmp.AllowUnexported(sidecarEvent{})); diff != "" {
		t.Errorf("agent events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]sidecarEvent{{sidecar: 71, version: 3, at: time.Unix(0, 150)}}, s.routing, cmp.AllowUnexported(sidecarEvent{})); diff != "" {
		t.Errorf("sidecar events (-want +got):\n%s", diff)
	}
	if s.badLines != 1 {
		t.Errorf("%d lines refused, want 1 (the agentRouting line without its policy)", s.badLines)
	}
	var woke []string
	for e := range s.notify {
		woke = append(woke, e.Event)
	}
	if diff := cmp.Diff([]string{simproto.EventReady}, woke); diff != "" {
		t.Errorf("events passed to the run loop (-want +got):\n%s", diff)
	}
}

func TestParseHubPush(t *testing.T) {
	const text = `# TYPE heatsink_manager_fleet_routing_push_seconds histogram
heatsink_manager_fleet_routing_push_seconds_bucket{le="0.001"} 10
heatsink_manager_fleet_routing_push_seconds_bucket{le="0.002"} 600
heatsink_manager_fleet_routing_push_seconds_bucket{le="0.004"} 980
heatsink_manager_fleet_routing_push_seconds_bucket{le="0.008"} 995
heatsink_manager_fleet_routing_push_seconds_bucket{le="+Inf"} 1000
heatsink_manager_fleet_routing_push_seconds_sum 2.5
heatsink_manager_fleet_routing_push_seconds_count 1000
# TYPE other_total counter
other_total 3
`
	got, err := parseHubPush(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	// Rank 500 is in the 2 ms bucket; rank 990 in the 8 ms one.
	want := &HubPush{Samples: 1000, MeanMs: 2.5, P50Ms: 2, P99Ms: 8}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hub push (-want +got):\n%s", diff)
	}
	for name, text := range map[string]string{
		"no histogram": "# TYPE other_total counter\nother_total 3\n",
		"no sample":    "# TYPE heatsink_manager_fleet_routing_push_seconds histogram\nheatsink_manager_fleet_routing_push_seconds_bucket{le=\"+Inf\"} 0\nheatsink_manager_fleet_routing_push_seconds_sum 0\nheatsink_manager_fleet_routing_push_seconds_count 0\n",
	} {
		if got, err := parseHubPush(strings.NewReader(text)); err != nil || got != nil {
			t.Errorf("%s: got %+v, %v; want nil, nil", name, got, err)
		}
	}
	if _, err := parseHubPush(strings.NewReader("not { metrics")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestTroubles(t *testing.T) {
	tests := map[string]struct {
		stats, progress map[string]float64
		want            []string
	}{
		"clean":             {stats: map[string]float64{"wire_dropped": 0, "viral_reads": 10}},
		"from the stats":    {stats: map[string]float64{"wire_send_errors": 3, "detector_restarts": 1, "wire_lost_entries": 0}, progress: map[string]float64{"detector_restarts": 9}, want: []string{"node simulator: detector_restarts = 1", "node simulator: wire_send_errors = 3"}},
		"no done, progress": {progress: map[string]float64{"detector_restarts": 2}, want: []string{"node simulator: detector_restarts = 2"}},
		"on schedule":       {stats: map[string]float64{"max_tick_gap_seconds": 0.46}},
		"fell behind": {stats: map[string]float64{"max_tick_gap_seconds": 6.04}, want: []string{"node simulator: a simulated node fell 6.0 s behind its traffic " +
			"(max_tick_gap_seconds): the machine could not run this row in real time, and its times are late by up to that"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, troubles(tc.stats, tc.progress)); diff != "" {
				t.Errorf("troubles (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLateness(t *testing.T) {
	ready := time.Unix(100, 0)
	tc := simproto.Defaults()
	tc.HotStart, tc.HotDuration = 10*time.Second, 20*time.Second
	tests := map[string]struct {
		phases map[string]time.Time
		want   []string
	}{
		"on time": {phases: map[string]time.Time{"hot": ready.Add(10*time.Second + 20*time.Millisecond), "rest": ready.Add(30 * time.Second)}},
		"late rest": {phases: map[string]time.Time{"hot": ready.Add(10 * time.Second), "rest": ready.Add(42 * time.Second)},
			want: []string{"node simulator: rest phase began 12.0 s late"}},
		"no hot": {phases: map[string]time.Time{"rest": ready.Add(30 * time.Second)}, want: []string{"node simulator: no hot phase event"}},
	}
	for name, tc2 := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc2.want, lateness(ready, tc2.phases, tc)); diff != "" {
				t.Errorf("lateness (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProbeFanOut(t *testing.T) {
	t0 := time.Unix(7000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	v := seenVersion{Version: 5, At: at(0), Keys: []string{ProbeKey}}
	events := []sidecarEvent{
		{sidecar: 0, version: 4, at: at(-5000)}, // before the probe
		{sidecar: 0, version: 5, at: at(10)},
		{sidecar: 1, version: 5, at: at(-3)},  // its watch was first
		{sidecar: 2, version: 6, at: at(400)}, // skipped 5
		{sidecar: 2, version: 7, at: at(900)},
	}
	got := probeFanOut(v, events)
	want := FanOut{Versions: 1, Samples: 3, P50Ms: 10, P99Ms: 400, MaxMs: 400, LastVersion: 5, LastReached: 3}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("probeFanOut (-want +got):\n%s", diff)
	}
}

func TestMergeDetections(t *testing.T) {
	tests := map[string]struct {
		ds   []Detection
		lats [][]float64
		want Detection
	}{
		"one policy is itself": {
			ds:   []Detection{{Detected: true, Seconds: 1.2, Version: 2, SidecarsReached: 3, SidecarsP50: 1.3, SidecarsP99: 1.4}},
			lats: [][]float64{{1.25, 1.3, 1.4}},
			want: Detection{Detected: true, Seconds: 1.2, Version: 2, SidecarsReached: 3, SidecarsP50: 1.3, SidecarsP99: 1.4},
		},
		"all detected: the slowest, percentiles over every sidecar": {
			ds:   []Detection{{Detected: true, Seconds: 1, Version: 2, SidecarsReached: 2}, {Detected: true, Seconds: 3, Version: 4, SidecarsReached: 2}},
			lats: [][]float64{{1.5, 1.6}, {3.5, 3.6}},
			want: Detection{Detected: true, Seconds: 3, Version: 4, SidecarsReached: 4, SidecarsP50: 1.6, SidecarsP99: 3.6, Of: 2, Count: 2},
		},
		"one never: not detected, counted": {
			ds:   []Detection{{Detected: true, Seconds: 1, Version: 2, SidecarsReached: 1}, {}},
			lats: [][]float64{{1.5}, nil},
			want: Detection{Seconds: 1, Version: 2, SidecarsReached: 1, SidecarsP50: 1.5, SidecarsP99: 1.5, Of: 2, Count: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, mergeDetections(tc.ds, tc.lats)); diff != "" {
				t.Errorf("mergeDetections (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeFanOuts(t *testing.T) {
	got := mergeFanOuts([]FanOut{{Versions: 1, LastVersion: 2, LastReached: 2, Unmatched: 1}, {Versions: 2, LastVersion: 3, LastReached: 1}},
		[][]float64{{10, 20}, {5}})
	want := FanOut{Versions: 3, Samples: 3, P50Ms: 10, P99Ms: 20, MaxMs: 20, LastVersion: 3, LastReached: 3, Unmatched: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mergeFanOuts (-want +got):\n%s", diff)
	}
}

func TestEventsOfPolicy(t *testing.T) {
	tc := simproto.Defaults()
	tc.Nodes, tc.SidecarsPerNode, tc.Policies = 2, 4, 3 // sidecars 0,3 → policy 0; 1 → 1; 2 → 2
	var events []sidecarEvent
	for s := range tc.Sidecars() {
		events = append(events, sidecarEvent{sidecar: s, version: 1})
	}
	var got []int
	for _, e := range eventsOf(events, 0, &tc) {
		got = append(got, e.sidecar)
	}
	if diff := cmp.Diff([]int{0, 3, 4, 7}, got); diff != "" {
		t.Errorf("policy 0's sidecars (-want +got):\n%s", diff)
	}
	if n := sidecarsOf(0, &tc); n != 4 {
		t.Errorf("sidecarsOf(0) = %d, want 4", n)
	}
	if n := sidecarsOf(2, &tc); n != 2 {
		t.Errorf("sidecarsOf(2) = %d, want 2", n)
	}
	tc.Policies = 1
	if got := eventsOf(events, 0, &tc); len(got) != len(events) {
		t.Errorf("one policy: %d events kept, want all %d", len(got), len(events))
	}
}

// TestManagerCost: per node, per summary and projected, from a row's
// manager CPU over the phases, its peak RSS and the summaries sent.
func TestManagerCost(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &Result{Design: "fleet", Nodes: 1000, Processes: map[string]*ProcStats{"manager": {CPUPhases: 30, PeakRSSMB: 200}},
		MarkAt: map[string]time.Time{"ready": t0, "end": t0.Add(60 * time.Second)},
		Stats:  map[string]float64{summariesInTraffic: 60000, simproto.NodeTickLag + lagP99: 0.02, simproto.NodeTickLag + lagMax: 0.1}}
	got := managerCost(r)
	want := &ManagerCost{Nodes: 1000, Cores: 0.5, CPUPerNodeMs: 0.5, CPUPerSummaryMs: 0.5, Summaries: 60000, RSSPerNodeKiB: 204.8}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("managerCost (-want +got):\n%s", diff)
	}
	if cores, mib := got.projected(20000); math.Abs(cores-10) > 1e-9 || math.Abs(mib-4000) > 1e-9 {
		t.Errorf("at 20,000 nodes: %g cores, %g MiB; want 10, 4000", cores, mib)
	}
	var b strings.Builder
	writeCosts(&b, []*Result{r, {Design: "legacy", Nodes: 10}})
	if !strings.Contains(b.String(), "| fleet | 1000 | yes | 0.50 | 0.500 ms | 0.50 ms (60000 summaries) | 205 KiB | 2.50 cores, 1000 MiB | 10.00 cores, 4000 MiB |") ||
		strings.Contains(b.String(), "| legacy |") {
		t.Errorf("writeCosts:\n%s", b.String())
	}
	// Without the simulator's lag counters (its done line never came) the
	// row must not read as run in real time.
	noLag := &Result{Design: "fleet", Nodes: 5000, Reached: "done", Processes: r.Processes, MarkAt: r.MarkAt}
	b.Reset()
	writeCosts(&b, []*Result{noLag})
	if !strings.Contains(b.String(), "| fleet | 5000 | unknown (no lag counters) |") {
		t.Errorf("writeCosts without lag counters:\n%s", b.String())
	}
	if got := lagCell(noLag); !strings.Contains(got, "unknown") {
		t.Errorf("lagCell without lag counters = %q, want it unknown", got)
	}
	r.Stats[followerTimerLag+lagP99] = 0.3
	if got := behindNote(r.Stats); len(got) != 1 || !strings.Contains(got[0], "followers' timers 300 ms") {
		t.Errorf("behindNote = %q, want one note naming the followers' 300 ms", got)
	}
	if got := behindNote(map[string]float64{simproto.NodeTickLag + lagP99: 0.05}); got != nil {
		t.Errorf("behindNote under a tick = %q, want none", got)
	}
}
