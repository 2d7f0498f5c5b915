package capacity

import (
	"math"
	"testing"
	"time"
)

func TestObserve(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	o := Options{MinUtilization: 0.02, FullConfidenceCPU: 10, Memory: time.Hour}
	type step struct {
		s                    Sample
		util, capacity, conf float64
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"first sample is a baseline", []step{
			{Sample{At: at(0), RunID: "a", Commands: 100, CPU: 1}, 0, 0, 0},
		}},
		{"half a core, 50k ops/s: 100k ops per CPU-second", []step{
			{Sample{At: at(0), RunID: "a", Commands: 0, CPU: 0}, 0, 0, 0},
			{Sample{At: at(10), RunID: "a", Commands: 500_000, CPU: 5}, 0.5, 100_000, 0.5},
			// The first 5 CPU-seconds decayed by e^(-10 s / 1 h).
			{Sample{At: at(20), RunID: "a", Commands: 1_000_000, CPU: 10}, 0.5, 100_000, (5*math.Exp(-10.0/3600) + 5) / 10},
		}},
		{"idle intervals teach nothing and forget nothing", []step{
			{Sample{At: at(0), RunID: "a"}, 0, 0, 0},
			{Sample{At: at(10), RunID: "a", Commands: 500_000, CPU: 5}, 0.5, 100_000, 0.5},
			// 0.01 of a core, housekeeping mostly: below MinUtilization.
			{Sample{At: at(20), RunID: "a", Commands: 500_010, CPU: 5.1}, 0.01, 100_000, 0.5},
		}},
		{"a dearer mix lowers the estimate", []step{
			{Sample{At: at(0), RunID: "a"}, 0, 0, 0},
			{Sample{At: at(10), RunID: "a", Commands: 100_000, CPU: 5}, 0.5, 20_000, 0.5},
		}},
		{"a restart takes a new baseline and keeps the estimate", []step{
			{Sample{At: at(0), RunID: "a"}, 0, 0, 0},
			{Sample{At: at(10), RunID: "a", Commands: 500_000, CPU: 5}, 0.5, 100_000, 0.5},
			{Sample{At: at(20), RunID: "b", Commands: 10, CPU: 0.1}, 0, 100_000, 0.5},
			{Sample{At: at(30), RunID: "b", Commands: 500_010, CPU: 5.1}, 0.5, 100_000, (5*math.Exp(-10.0/3600) + 5) / 10},
		}},
		{"counters going back (same run id) take a new baseline", []step{
			{Sample{At: at(0), RunID: "a", Commands: 1000, CPU: 1}, 0, 0, 0},
			{Sample{At: at(10), RunID: "a", Commands: 10, CPU: 1.5}, 0, 0, 0},
		}},
		{"a sample not after the last is a baseline", []step{
			{Sample{At: at(10), RunID: "a"}, 0, 0, 0},
			{Sample{At: at(10), RunID: "a", Commands: 5000, CPU: 1}, 0, 0, 0},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e Estimate
			for i, st := range c.steps {
				e = Observe(e, st.s, o)
				if !near(e.Utilization, st.util) || !near(e.Capacity, st.capacity) || !near(e.Confidence, st.conf) {
					t.Fatalf("step %d: got util %v capacity %v confidence %v, want %v %v %v", i, e.Utilization, e.Capacity, e.Confidence, st.util, st.capacity, st.conf)
				}
			}
		})
	}
}

func TestObserveMemoryForgetsAnOldMix(t *testing.T) {
	o := Options{MinUtilization: 0.01, FullConfidenceCPU: 1, Memory: time.Minute}
	t0 := time.Unix(0, 0)
	e := Observe(Estimate{}, Sample{At: t0, RunID: "a"}, o)
	s := Sample{At: t0, RunID: "a"}
	// 10 minutes of a cheap mix (100k ops per CPU-second), then 10 minutes
	// of a dear one (10k): the estimate ends near the dear mix.
	for i := 0; i < 120; i++ {
		s.At = s.At.Add(10 * time.Second)
		if i < 60 {
			s.Commands += 500_000
		} else {
			s.Commands += 50_000
		}
		s.CPU += 5
		e = Observe(e, s, o)
	}
	if e.Capacity < 10_000 || e.Capacity > 10_100 {
		t.Fatalf("capacity %v after 10 minutes of the dear mix, want within 1%% of 10000", e.Capacity)
	}
}

func TestParseInfo(t *testing.T) {
	txt := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n\r\n# Stats\r\ntotal_commands_processed:42\r\ninstantaneous_ops_per_sec:3\r\n" +
		"# CPU\r\nused_cpu_sys:2.5\r\nused_cpu_user:3.5\r\nused_cpu_sys_main_thread:1.25\r\nused_cpu_user_main_thread:2.25\r\n" +
		"# Commandstats\r\ncmdstat_get:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\ncmdstat_set:calls=5,usec=30,usec_per_call=6.00\r\n"
	s, err := ParseInfo(txt, time.Unix(7, 0))
	if err != nil {
		t.Fatal(err)
	}
	if s.RunID != "abc" || s.Commands != 42 || !near(s.CPU, 3.5) || s.Calls != 15 || s.CallUsec != 50 || !s.At.Equal(time.Unix(7, 0)) {
		t.Fatalf("got %+v", s)
	}
	// Without the main-thread fields (before 6.2): the process's CPU.
	s, err = ParseInfo("total_commands_processed:1\nused_cpu_sys:1\nused_cpu_user:2\n", time.Unix(7, 0))
	if err != nil || !near(s.CPU, 3) {
		t.Fatalf("fallback: %+v %v", s, err)
	}
	for _, bad := range []string{"", "used_cpu_sys:1\n", "total_commands_processed:1\n", "total_commands_processed:x\nused_cpu_sys:1\n"} {
		if _, err := ParseInfo(bad, time.Unix(7, 0)); err == nil {
			t.Errorf("ParseInfo(%q) accepted", bad)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
