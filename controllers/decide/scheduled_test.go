package decide

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
)

func TestScheduledKeys(t *testing.T) {
	repl := v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 8}}
	schedules := []v1alpha1.Schedule{
		{Name: "bf", Keys: []string{"product:1", "product:2"}, Mitigation: repl},
		{Name: "launch", Keys: []string{"banner"}},
	}
	ev := func(name string, start time.Time) schedule.Event {
		return schedule.Event{Name: name, PrewarmAt: start.Add(-10 * time.Minute), Start: start, End: start.Add(time.Hour)}
	}
	key := func(k string, e schedule.Event, m v1alpha1.ScheduledMitigation) ScheduledKey {
		return ScheduledKey{Key: k, Schedule: e.Name, PrewarmAt: e.PrewarmAt, Start: e.Start, End: e.End, Mitigation: m}
	}
	bf, launch := ev("bf", t0), ev("launch", t0.Add(time.Hour))
	for name, tc := range map[string]struct {
		evs  []schedule.Event
		want []ScheduledKey
	}{
		"no event": {},
		"every key of the event's schedule, with its mitigation": {evs: []schedule.Event{bf},
			want: []ScheduledKey{key("product:1", bf, repl), key("product:2", bf, repl)}},
		"in the order of the events": {evs: []schedule.Event{launch, bf},
			want: []ScheduledKey{key("banner", launch, v1alpha1.ScheduledMitigation{}), key("product:1", bf, repl), key("product:2", bf, repl)}},
		"an event of no schedule of the spec": {evs: []schedule.Event{ev("gone", t0)}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ScheduledKeys(schedules, tc.evs)); diff != "" {
				t.Errorf("scheduled keys (-want +got):\n%s", diff)
			}
		})
	}
}
