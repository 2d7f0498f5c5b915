package report

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector/sketch"
)

func TestCandidates(t *testing.T) {
	th := Thresholds{ReadsPerSecond: 5000, WritesPerSecond: 1000, Fraction: 0.1}
	items := []sketch.Item{
		{Key: "cold", ReadRate: 499, WriteRate: 99},
		{Key: "read-hot", ReadRate: 6000},
		{Key: "write-warm", WriteRate: 500, ReadRate: 10},
		{Key: "read-warm", ReadRate: 1000, ByteRate: 64000},
		{Key: "both", ReadRate: 2500, WriteRate: 1500},
	}
	tests := map[string]struct {
		k    int
		want []string
	}{
		"all over the fraction, hottest first": {k: 10, want: []string{"both", "read-hot", "write-warm", "read-warm"}},
		"top 1 by reads and top 1 by writes":   {k: 1, want: []string{"both", "read-hot"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, c := range Candidates(items, tc.k, th) {
				got = append(got, c.Key)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	c := Candidates(items[3:4], 1, th)
	if diff := cmp.Diff([]v1alpha1.Candidate{{Key: "read-warm", ReadsPerSecond: 1000, BytesPerSecond: 64000}}, c); diff != "" {
		t.Errorf("rates (-want +got):\n%s", diff)
	}
}

func TestDecide(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	hot := []v1alpha1.Candidate{{Key: "a", ReadsPerSecond: 1000}}
	hotter := []v1alpha1.Candidate{{Key: "a", ReadsPerSecond: 1300}}
	slightly := []v1alpha1.Candidate{{Key: "a", ReadsPerSecond: 1100}}
	other := []v1alpha1.Candidate{{Key: "b", ReadsPerSecond: 1000}}
	tests := map[string]struct {
		st    State
		now   time.Time
		cands []v1alpha1.Candidate
		want  Decision
	}{
		"nothing near a threshold, never written": {State{}, t0, nil, Skip},
		"first candidates":                        {State{}, t0, hot, Write},
		"rate limit holds a material change":      {State{Written: true, At: t0, Candidates: hot}, t0.Add(999 * time.Millisecond), other, Skip},
		"material change after the interval":      {State{Written: true, At: t0, Candidates: hot}, t0.Add(sec), other, Write},
		"rate moved more than 20%":                {State{Written: true, At: t0, Candidates: hot}, t0.Add(sec), hotter, Write},
		"rate moved less than 20%":                {State{Written: true, At: t0, Candidates: hot}, t0.Add(sec), slightly, Skip},
		"refresh after two intervals":             {State{Written: true, At: t0, Candidates: hot}, t0.Add(2 * sec), slightly, Write},
		"candidates went away: one empty report":  {State{Written: true, At: t0, Candidates: hot}, t0.Add(sec), nil, Write},
		"still nothing: no more writes":           {State{Written: true, At: t0, Candidates: nil}, t0.Add(time.Hour), nil, Skip},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Decide(tc.now, tc.st, tc.cands, sec); got != tc.want {
				t.Errorf("Decide = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestName(t *testing.T) {
	if got := Name("checkout", "node-1"); got != "checkout-node-1" {
		t.Errorf("Name = %q", got)
	}
	long := Name(strings.Repeat("p", 200), strings.Repeat("n", 200))
	long2 := Name(strings.Repeat("p", 200), strings.Repeat("n", 199)+"m")
	for _, n := range []string{long, long2} {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%q: %v", n, errs)
		}
	}
	if long == long2 {
		t.Error("two long names collide")
	}
}
