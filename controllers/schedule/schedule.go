// Package schedule turns a policy's schedules (a one-off RFC 3339 start or a
// five-field cron in a time zone) into concrete events: when to pre-warm,
// start and end. Pure functions of the time, so tests use any instant.
package schedule

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// Event is one occurrence of a schedule.
type Event struct {
	Name      string
	PrewarmAt time.Time
	Start     time.Time
	End       time.Time
}

// Current returns the occurrence of s that matters at now: the earliest one
// not yet ended (running, in its lead time, or upcoming). ok is false when a
// one-off event is over. A recurring event whose occurrences overlap is
// handled one occurrence at a time: the next takes over when one ends.
func Current(now time.Time, s *v1alpha1.Schedule) (ev Event, ok bool, err error) {
	lead, dur := s.LeadTime.Duration, s.Duration.Duration
	if dur <= 0 {
		return Event{}, false, fmt.Errorf("schedule %q: duration must be positive", s.Name)
	}
	var start time.Time
	switch {
	case s.Start != nil && s.Cron == "":
		start = s.Start.Time
		if !start.Add(dur).After(now) {
			return Event{}, false, nil
		}
	case s.Start == nil && s.Cron != "":
		sched, loc, err := Parse(s)
		if err != nil {
			return Event{}, false, fmt.Errorf("schedule %q: %w", s.Name, err)
		}
		// The first start after now−duration is the first occurrence that
		// has not ended by now.
		start = sched.Next(now.Add(-dur).In(loc))
		if start.IsZero() {
			return Event{}, false, nil // a cron that never fires (e.g. Feb 30)
		}
	default:
		return Event{}, false, fmt.Errorf("schedule %q: needs exactly one of start and cron", s.Name)
	}
	start = start.UTC()
	return Event{Name: s.Name, PrewarmAt: start.Add(-lead), Start: start, End: start.Add(dur)}, true, nil
}

// FieldError is a schedule field that cannot be evaluated: Field is its
// name within the schedule (cron or timeZone), so the admission webhook can
// point at it and the manager can name it in status.
type FieldError struct {
	Field  string
	Value  string
	Detail string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Detail)
}

// Parse is the one parser of a schedule's cron and timeZone, used by the
// admission webhook (to refuse what the manager could not evaluate) and by
// the manager. A schedule with a start has neither. The error is a
// *FieldError.
func Parse(s *v1alpha1.Schedule) (cron.Schedule, *time.Location, error) {
	if s.Cron == "" {
		if s.TimeZone != "" {
			return nil, nil, &FieldError{"timeZone", s.TimeZone, "timeZone applies to cron only; start carries its own offset, e.g. 2026-11-27T00:00:00+01:00"}
		}
		return nil, nil, nil
	}
	if c := strings.TrimSpace(s.Cron); strings.HasPrefix(c, "CRON_TZ=") || strings.HasPrefix(c, "TZ=") {
		return nil, nil, &FieldError{"cron", s.Cron, "set the time zone in timeZone, not in cron"}
	}
	loc := time.UTC
	if s.TimeZone != "" {
		l, err := time.LoadLocation(s.TimeZone)
		if err != nil {
			return nil, nil, &FieldError{"timeZone", s.TimeZone, "unknown IANA time zone; use a name such as Europe/Paris or UTC"}
		}
		loc = l
	}
	sched, err := cron.ParseStandard(s.Cron)
	if err != nil {
		return nil, nil, &FieldError{"cron", s.Cron, "not a five-field cron expression (minute hour day-of-month month day-of-week), such as \"0 9 * * 1-5\": " + err.Error()}
	}
	return sched, loc, nil
}

// Events returns the current occurrence of every schedule, soonest start
// first, and the errors of schedules that cannot be evaluated (they are
// skipped; the rest still apply).
func Events(now time.Time, schedules []v1alpha1.Schedule) ([]Event, []error) {
	var out []Event
	var errs []error
	for i := range schedules {
		ev, ok, err := Current(now, &schedules[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, errs
}

// NextChange is the earliest instant after now at which an event's phase
// changes (pre-warm, start, end), or zero.
func NextChange(now time.Time, events []Event) time.Time {
	var next time.Time
	for _, ev := range events {
		for _, t := range []time.Time{ev.PrewarmAt, ev.Start, ev.End} {
			if t.After(now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}
