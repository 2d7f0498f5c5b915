package decide

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestEachSpecFieldChangesTheDecision is one row per HotKeyPolicy field that
// the decision reads: the row sets the field, runs the same traffic (or
// schedule) through Decide with and without the change, and checks that
// what the field promises happens, and that it does not happen without it.
// test/repo's TestEverySpecFieldIsTested keeps a row here (or elsewhere)
// for every field of the spec.
func TestEachSpecFieldChangesTheDecision(t *testing.T) {
	reads := func(n int64) map[string]Observation {
		return map[string]Observation{"k": {Families: strFams, ReadsPerSecond: n}}
	}
	writes := func(n int64) map[string]Observation {
		return map[string]Observation{"k": {Families: strFams, WritesPerSecond: n}}
	}
	sustained := func(obs map[string]Observation) []tick { return []tick{{0, obs}, {2 * time.Second, obs}} }
	entry := func(out Output) *routing.Entry {
		for i := range out.Entries {
			if out.Entries[i].Key == "k" {
				return &out.Entries[i]
			}
		}
		return nil
	}
	// Probes: what a row observes of the decision.
	mitigated := func(out Output) string { return fmt.Sprint(entry(out) != nil) }
	shards := func(out Output) string {
		if e := entry(out); e != nil && e.Split != nil {
			g := e.Split.Generations[len(e.Split.Generations)-1]
			return fmt.Sprintf("%d shards from epoch %d", g.Shards, g.FromEpoch)
		}
		return "not split"
	}
	replicas := func(out Output) string {
		if e := entry(out); e != nil && e.Replicate != nil {
			return fmt.Sprintf("%d replicas, ttl %dms", e.Replicate.Replicas, e.Replicate.TTLMillis)
		}
		return "not replicated"
	}
	cache := func(out Output) string {
		if e := entry(out); e != nil && e.LocalCache != nil {
			return fmt.Sprintf("cached %dms ±%d%%", e.LocalCache.TTLMillis, e.LocalCache.JitterPercent)
		}
		return "not cached"
	}
	refresh := func(out Output) string {
		e := entry(out)
		if e == nil || e.LocalCache == nil {
			return "not cached"
		}
		var status []v1alpha1.MitigationType
		for _, k := range out.Keys {
			if k.Key == "k" {
				status = k.Mitigations
			}
		}
		return fmt.Sprintf("refresh %d%% ahead, status %v", e.LocalCache.RefreshAheadPercent, status)
	}
	coalesced := func(out Output) string { e := entry(out); return fmt.Sprint(e != nil && e.Coalesce) }
	preagg := func(out Output) string {
		if e := entry(out); e != nil && e.PreAggregate != nil {
			return fmt.Sprintf("pre-aggregated, flush %dms", e.PreAggregate.FlushMillis)
		}
		return "not pre-aggregated"
	}
	count := func(out Output) string { return fmt.Sprint(len(out.Entries)) }
	enable := func(f func(*v1alpha1.Mitigations) **bool) func(*v1alpha1.HotKeyPolicySpec) {
		return func(s *v1alpha1.HotKeyPolicySpec) { *f(&s.Mitigations) = ptr.To(true) }
	}

	tests := map[string]struct {
		base  func(*v1alpha1.HotKeyPolicySpec) // the row's starting spec, besides testSpec's
		field func(*v1alpha1.HotKeyPolicySpec) // the change under test
		ticks []tick
		probe func(Output) string
		want  string // the probe with the change; without it the probe differs
	}{
		"thresholds.readsPerSecond": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Thresholds.ReadsPerSecond = 7000 },
			ticks: sustained(reads(6000)), probe: mitigated, want: "false",
		},
		"thresholds.writesPerSecond": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Thresholds.WritesPerSecond = 3000 },
			ticks: sustained(writes(2000)), probe: mitigated, want: "false",
		},
		"thresholds.sustainFor": {
			field: func(s *v1alpha1.HotKeyPolicySpec) {
				s.Thresholds.SustainFor = metav1.Duration{Duration: 5 * time.Second}
			},
			ticks: sustained(reads(6000)), probe: mitigated, want: "false",
		},
		"thresholds.cooldown": {
			field: func(s *v1alpha1.HotKeyPolicySpec) {
				s.Thresholds.Cooldown = metav1.Duration{Duration: 10 * time.Second}
			},
			ticks: []tick{{0, reads(6000)}, {2 * time.Second, reads(6000)}, {3 * time.Second, reads(100)}, {14 * time.Second, reads(100)}},
			probe: mitigated, want: "false",
		},
		"thresholds.hysteresisPercent": {
			base: func(s *v1alpha1.HotKeyPolicySpec) {
				s.Thresholds.Cooldown = metav1.Duration{Duration: 10 * time.Second}
			},
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Thresholds.HysteresisPercent = 0 },
			// 4500/s is under 5000 but inside a 20% band: it cools only without one.
			ticks: []tick{{0, reads(6000)}, {2 * time.Second, reads(6000)}, {3 * time.Second, reads(4500)}, {14 * time.Second, reads(4500)}},
			probe: mitigated, want: "false",
		},
		"capacity.perShardWritesPerSecond": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.PerShardWritesPerSecond = 50000 },
			ticks: sustained(writes(100000)), probe: shards, want: "3 shards from epoch 1001",
		},
		"capacity.perShardReadsPerSecond": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.PerShardReadsPerSecond = 25000 },
			ticks: sustained(reads(100000)), probe: replicas, want: "5 replicas, ttl 300000ms",
		},
		"capacity.headroomPercent": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.HeadroomPercent = 0 },
			ticks: sustained(writes(100000)), probe: shards, want: "5 shards from epoch 1001",
		},
		"capacity.maxMitigatedKeys": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.MaxMitigatedKeys = 2 },
			ticks: sustained(map[string]Observation{"a": {Families: strFams, ReadsPerSecond: 6000}, "b": {Families: strFams, ReadsPerSecond: 7000}, "c": {Families: strFams, ReadsPerSecond: 8000}}),
			probe: count, want: "2",
		},
		"mitigations.coalesce.enabled": {
			field: enable(func(m *v1alpha1.Mitigations) **bool { return &m.Coalesce.Enabled }),
			ticks: sustained(reads(6000)), probe: coalesced, want: "true",
		},
		"mitigations.localCache.enabled": {
			field: enable(func(m *v1alpha1.Mitigations) **bool { return &m.LocalCache.Enabled }),
			ticks: sustained(reads(6000)), probe: cache, want: "cached 2000ms ±10%",
		},
		"mitigations.localCache.ttl": {
			base: enable(func(m *v1alpha1.Mitigations) **bool { return &m.LocalCache.Enabled }),
			field: func(s *v1alpha1.HotKeyPolicySpec) {
				s.Mitigations.LocalCache.TTL = metav1.Duration{Duration: 5 * time.Second}
			},
			ticks: sustained(reads(6000)), probe: cache, want: "cached 5000ms ±10%",
		},
		"mitigations.localCache.jitterPercent": {
			base:  enable(func(m *v1alpha1.Mitigations) **bool { return &m.LocalCache.Enabled }),
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.LocalCache.JitterPercent = 30 },
			ticks: sustained(reads(6000)), probe: cache, want: "cached 2000ms ±30%",
		},
		"mitigations.localCache.refreshAheadPercent": {
			base:  enable(func(m *v1alpha1.Mitigations) **bool { return &m.LocalCache.Enabled }),
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.LocalCache.RefreshAheadPercent = ptr.To[int32](0) },
			ticks: sustained(reads(6000)), probe: refresh, want: "refresh 0% ahead, status [LocalCache]",
		},
		"mitigations.replicate.enabled": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Replicate.Enabled = ptr.To(false) },
			ticks: sustained(reads(100000)), probe: replicas, want: "not replicated",
		},
		"mitigations.replicate.maxReplicas": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Replicate.MaxReplicas = 4 },
			ticks: sustained(reads(1_000_000)), probe: replicas, want: "4 replicas, ttl 300000ms",
		},
		"mitigations.replicate.replicaTTL": {
			field: func(s *v1alpha1.HotKeyPolicySpec) {
				s.Mitigations.Replicate.ReplicaTTL = metav1.Duration{Duration: time.Minute}
			},
			ticks: sustained(reads(100000)), probe: replicas, want: "3 replicas, ttl 60000ms",
		},
		"mitigations.split.enabled": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Split.Enabled = ptr.To(false) },
			ticks: sustained(writes(100000)), probe: shards, want: "not split",
		},
		"mitigations.split.maxShards": {
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Split.MaxShards = 16 },
			ticks: sustained(writes(10_000_000)), probe: shards, want: "16 shards from epoch 1001",
		},
		"mitigations.split.epoch": {
			// t0 is the start of epoch 1000 of 60s epochs, so of epoch 500 of 120s ones.
			field: func(s *v1alpha1.HotKeyPolicySpec) {
				s.Mitigations.Split.Epoch = metav1.Duration{Duration: 2 * time.Minute}
			},
			ticks: sustained(writes(100000)), probe: shards, want: "7 shards from epoch 501",
		},
		"mitigations.preAggregate.enabled": {
			field: enable(func(m *v1alpha1.Mitigations) **bool { return &m.PreAggregate.Enabled }),
			ticks: sustained(writes(2000)), probe: preagg, want: "pre-aggregated, flush 100ms",
		},
		"mitigations.preAggregate.flushInterval": {
			base: enable(func(m *v1alpha1.Mitigations) **bool { return &m.PreAggregate.Enabled }),
			field: func(s *v1alpha1.HotKeyPolicySpec) {
				s.Mitigations.PreAggregate.FlushInterval = metav1.Duration{Duration: 250 * time.Millisecond}
			},
			ticks: sustained(writes(2000)), probe: preagg, want: "pre-aggregated, flush 250ms",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base := []func(*v1alpha1.HotKeyPolicySpec){}
			if tc.base != nil {
				base = append(base, tc.base)
			}
			without := tc.probe(run(testSpec(base...), tc.ticks))
			with := tc.probe(run(testSpec(append(base, tc.field)...), tc.ticks))
			if with != tc.want {
				t.Errorf("with the change: %s, want %s", with, tc.want)
			}
			if without == with {
				t.Errorf("the change makes no difference: %s either way", with)
			}
		})
	}
}

// TestEachScheduleFieldChangesTheDecision does the same for the fields of
// spec.schedules, through the schedule parser and ScheduledKeys.
func TestEachScheduleFieldChangesTheDecision(t *testing.T) {
	start := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC) // a Friday
	base := func() v1alpha1.Schedule {
		return v1alpha1.Schedule{Name: "sale", Start: &metav1.Time{Time: start},
			Duration: metav1.Duration{Duration: 2 * time.Hour}, LeadTime: metav1.Duration{Duration: 10 * time.Minute},
			Keys: []string{"k"}, Mitigation: v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 8}}}
	}
	// decideAt runs the schedule through the manager's path: events, keys, decision.
	decideAt := func(s v1alpha1.Schedule, at time.Time) (Output, []schedule.Event) {
		spec := testSpec(func(sp *v1alpha1.HotKeyPolicySpec) {
			sp.Mitigations.LocalCache.Enabled = ptr.To(true)
			sp.Mitigations.Coalesce.Enabled = ptr.To(true)
			sp.Mitigations.ReplicaReads.Enabled = ptr.To(true)
			sp.Schedules = []v1alpha1.Schedule{s}
		})
		evs, errs := schedule.Events(at, spec.Schedules)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return Decide(Input{Now: at, Spec: spec, Scheduled: ScheduledKeys(spec.Schedules, evs), Margin: 10 * time.Second}), evs
	}
	describe := func(out Output, evs []schedule.Event) string {
		var parts []string
		for _, ev := range evs {
			parts = append(parts, "event "+ev.Name)
		}
		for _, e := range out.Entries {
			p := "entry " + e.Key
			if e.Coalesce {
				p += " coalesce"
			}
			if e.Replicate != nil {
				p += fmt.Sprintf(" replicas=%d", e.Replicate.Replicas)
			}
			if e.LocalCache != nil {
				p += fmt.Sprintf(" cache=%dms", e.LocalCache.TTLMillis)
			}
			if e.Split != nil {
				p += fmt.Sprintf(" shards=%d", e.Split.Generations[len(e.Split.Generations)-1].Shards)
			}
			if e.ReplicaReads != nil {
				p += fmt.Sprintf(" replicaReads=%dms", e.ReplicaReads.MaxLagMillis)
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, ", ")
	}
	tests := map[string]struct {
		field func(*v1alpha1.Schedule)
		at    time.Time
		want  string
	}{
		"schedules[].name": {field: func(s *v1alpha1.Schedule) { s.Name = "black-friday" }, at: start,
			want: "event black-friday, entry k replicas=8"},
		"schedules[].start": {field: func(s *v1alpha1.Schedule) { s.Start = &metav1.Time{Time: start.Add(24 * time.Hour)} }, at: start,
			want: "event sale"},
		"schedules[].cron": {field: func(s *v1alpha1.Schedule) { s.Start, s.Cron = nil, "0 9 * * 5" }, at: start.Add(7 * 24 * time.Hour),
			want: "event sale, entry k replicas=8"},
		"schedules[].timeZone": {
			field: func(s *v1alpha1.Schedule) { s.Start, s.Cron, s.TimeZone = nil, "0 9 * * 5", "America/New_York" },
			at:    start.Add(7 * 24 * time.Hour), want: "event sale"},
		"schedules[].duration": {field: func(s *v1alpha1.Schedule) { s.Duration = metav1.Duration{Duration: 30 * time.Minute} }, at: start.Add(time.Hour),
			want: ""},
		"schedules[].leadTime": {field: func(s *v1alpha1.Schedule) { s.LeadTime = metav1.Duration{Duration: 30 * time.Minute} }, at: start.Add(-20 * time.Minute),
			want: "event sale, entry k replicas=8"},
		"schedules[].keys": {field: func(s *v1alpha1.Schedule) { s.Keys = []string{"product:1", "product:2"} }, at: start,
			want: "event sale, entry product:1 replicas=8, entry product:2 replicas=8"},
		"schedules[].mitigation.coalesce": {field: func(s *v1alpha1.Schedule) { s.Mitigation.Coalesce = true }, at: start,
			want: "event sale, entry k coalesce replicas=8"},
		"schedules[].mitigation.replicate.replicas": {field: func(s *v1alpha1.Schedule) { s.Mitigation.Replicate.Replicas = 4 }, at: start,
			want: "event sale, entry k replicas=4"},
		"schedules[].mitigation.localCache.ttl": {
			field: func(s *v1alpha1.Schedule) {
				s.Mitigation.LocalCache = &v1alpha1.ScheduledLocalCache{TTL: &metav1.Duration{Duration: 500 * time.Millisecond}}
			}, at: start, want: "event sale, entry k replicas=8 cache=500ms"},
		"schedules[].mitigation.split.shards": {
			field: func(s *v1alpha1.Schedule) { s.Mitigation.Split = &v1alpha1.ScheduledSplit{Shards: 16} }, at: start,
			want: "event sale, entry k replicas=8 shards=16"},
		"schedules[].mitigation.replicaReads": {field: func(s *v1alpha1.Schedule) { s.Mitigation.ReplicaReads = true }, at: start,
			want: "event sale, entry k replicas=8 replicaReads=1000ms"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := base()
			without := describe(decideAt(s, tc.at))
			tc.field(&s)
			with := describe(decideAt(s, tc.at))
			if with != tc.want {
				t.Errorf("with the change: %q, want %q", with, tc.want)
			}
			if with == without {
				t.Errorf("the change makes no difference: %q either way", with)
			}
		})
	}
}
