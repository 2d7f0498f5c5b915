package decide

import (
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
)

// ScheduledKeys expands the events of schedules (schedule.Events: those in
// or before their window) into one ScheduledKey per key of the event's
// schedule, in the order of the events and then of the keys.
func ScheduledKeys(schedules []v1alpha1.Schedule, evs []schedule.Event) []ScheduledKey {
	var out []ScheduledKey
	for _, ev := range evs {
		for i := range schedules {
			s := &schedules[i]
			if s.Name != ev.Name {
				continue
			}
			for _, k := range s.Keys {
				out = append(out, ScheduledKey{Key: k, Schedule: s.Name, PrewarmAt: ev.PrewarmAt, Start: ev.Start, End: ev.End, Mitigation: s.Mitigation})
			}
		}
	}
	return out
}

// mitigationRank orders a key's mitigations cheapest first.
func mitigationRank(t v1alpha1.MitigationType) int {
	switch t {
	case v1alpha1.MitigationCoalesce:
		return 0
	case v1alpha1.MitigationLocalCache:
		return 1
	case v1alpha1.MitigationReplicaReads:
		return 2
	case v1alpha1.MitigationReplicate:
		return 3
	case v1alpha1.MitigationShed:
		return 7
	case v1alpha1.MitigationSplit:
		return 4
	default:
		return 5
	}
}
