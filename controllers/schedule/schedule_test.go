package schedule

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

func TestCurrent(t *testing.T) {
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	oneOff := func(start string) v1alpha1.Schedule {
		return v1alpha1.Schedule{Name: "bf", Start: &metav1.Time{Time: at(start)},
			Duration: metav1.Duration{Duration: 6 * time.Hour}, LeadTime: metav1.Duration{Duration: 10 * time.Minute}}
	}
	cronS := func(expr, tz string) v1alpha1.Schedule {
		return v1alpha1.Schedule{Name: "daily", Cron: expr, TimeZone: tz,
			Duration: metav1.Duration{Duration: time.Hour}, LeadTime: metav1.Duration{Duration: 5 * time.Minute}}
	}
	tests := map[string]struct {
		s       v1alpha1.Schedule
		now     string
		want    *Event
		wantErr bool
	}{
		"one-off upcoming": {
			s: oneOff("2026-11-27T00:00:00Z"), now: "2026-11-20T00:00:00Z",
			want: &Event{Name: "bf", PrewarmAt: at("2026-11-26T23:50:00Z"), Start: at("2026-11-27T00:00:00Z"), End: at("2026-11-27T06:00:00Z")},
		},
		"one-off running": {
			s: oneOff("2026-11-27T00:00:00Z"), now: "2026-11-27T05:59:59Z",
			want: &Event{Name: "bf", PrewarmAt: at("2026-11-26T23:50:00Z"), Start: at("2026-11-27T00:00:00Z"), End: at("2026-11-27T06:00:00Z")},
		},
		"one-off over": {s: oneOff("2026-11-27T00:00:00Z"), now: "2026-11-27T06:00:00Z"},
		"cron next in UTC": {
			s: cronS("0 9 * * 1-5", ""), now: "2026-11-30T08:00:00Z", // a Monday
			want: &Event{Name: "daily", PrewarmAt: at("2026-11-30T08:55:00Z"), Start: at("2026-11-30T09:00:00Z"), End: at("2026-11-30T10:00:00Z")},
		},
		"cron running stays current": {
			s: cronS("0 9 * * 1-5", ""), now: "2026-11-30T09:30:00Z",
			want: &Event{Name: "daily", PrewarmAt: at("2026-11-30T08:55:00Z"), Start: at("2026-11-30T09:00:00Z"), End: at("2026-11-30T10:00:00Z")},
		},
		"cron skips the weekend": {
			s: cronS("0 9 * * 1-5", ""), now: "2026-11-27T10:00:00Z", // Friday after the event
			want: &Event{Name: "daily", PrewarmAt: at("2026-11-30T08:55:00Z"), Start: at("2026-11-30T09:00:00Z"), End: at("2026-11-30T10:00:00Z")},
		},
		"cron in a time zone": {
			s: cronS("0 9 * * *", "Europe/Paris"), now: "2026-11-30T00:00:00Z",
			want: &Event{Name: "daily", PrewarmAt: at("2026-11-30T07:55:00Z"), Start: at("2026-11-30T08:00:00Z"), End: at("2026-11-30T09:00:00Z")},
		},
		"bad cron":      {s: cronS("61 * * * *", ""), now: "2026-11-30T00:00:00Z", wantErr: true},
		"bad time zone": {s: cronS("0 9 * * *", "Mars/Olympus"), now: "2026-11-30T00:00:00Z", wantErr: true},
		"tz in cron":    {s: cronS("CRON_TZ=UTC 0 9 * * *", ""), now: "2026-11-30T00:00:00Z", wantErr: true},
		"neither":       {s: v1alpha1.Schedule{Name: "x", Duration: metav1.Duration{Duration: time.Hour}}, now: "2026-11-30T00:00:00Z", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ev, ok, err := Current(at(tc.now), &tc.s)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			var got *Event
			if ok {
				got = &ev
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzCurrent(f *testing.F) {
	f.Add("0 9 * * 1-5", "Europe/Paris", int64(3600))
	f.Add("*/5 * * * *", "", int64(60))
	f.Add("@every 1h", "UTC", int64(1))
	f.Fuzz(func(t *testing.T, expr, tz string, durSec int64) {
		s := v1alpha1.Schedule{Name: "f", Cron: expr, TimeZone: tz, Duration: metav1.Duration{Duration: time.Duration(durSec) * time.Second}}
		ev, ok, err := Current(time.Unix(1_800_000_000, 0), &s)
		if err == nil && ok && !ev.End.After(ev.Start) {
			t.Fatalf("event ends before it starts: %+v", ev)
		}
	})
}

// TestParseNamesTheField checks that the one schedule parser (used by the
// admission webhook and the manager) says which field is wrong.
func TestParseNamesTheField(t *testing.T) {
	start := &metav1.Time{Time: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)}
	tests := map[string]struct {
		s         v1alpha1.Schedule
		wantField string // empty: valid
	}{
		"one-off":                 {s: v1alpha1.Schedule{Start: start}},
		"cron in UTC":             {s: v1alpha1.Schedule{Cron: "0 9 * * 1-5"}},
		"cron in a zone":          {s: v1alpha1.Schedule{Cron: "0 9 * * *", TimeZone: "Europe/Paris"}},
		"six fields":              {s: v1alpha1.Schedule{Cron: "0 0 9 * * *"}, wantField: "cron"},
		"minute 61":               {s: v1alpha1.Schedule{Cron: "61 * * * *"}, wantField: "cron"},
		"CRON_TZ prefix":          {s: v1alpha1.Schedule{Cron: "CRON_TZ=UTC 0 9 * * *"}, wantField: "cron"},
		"TZ prefix":               {s: v1alpha1.Schedule{Cron: "TZ=UTC 0 9 * * *"}, wantField: "cron"},
		"unknown zone":            {s: v1alpha1.Schedule{Cron: "0 9 * * *", TimeZone: "Mars/Olympus_Mons"}, wantField: "timeZone"},
		"zone on a one-off start": {s: v1alpha1.Schedule{Start: start, TimeZone: "Europe/Paris"}, wantField: "timeZone"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := Parse(&tc.s)
			got := ""
			if err != nil {
				fe, ok := err.(*FieldError)
				if !ok {
					t.Fatalf("error %v is a %T, want *FieldError", err, err)
				}
				got = fe.Field
			}
			if got != tc.wantField {
				t.Errorf("field = %q (err %v), want %q", got, err, tc.wantField)
			}
		})
	}
}
