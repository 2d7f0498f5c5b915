package top

import (
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestTopShowsFamiliesAndWhy: a hot key no move serves (a queue) is shown
// with its command families and why it is not split, from status, and a
// report-only key with its families from the report.
func TestTopShowsFamiliesAndWhy(t *testing.T) {
	ps, rs := fixture()
	ps[0].Status.HotKeys = append(ps[0].Status.HotKeys, v1alpha1.HotKeyStatus{Key: "queue:jobs", WritesPerSecond: 9000,
		Source: v1alpha1.SourceDetected, Families: []string{"list/stream"}, Reason: "list or stream (order-bearing, e.g. a queue): order forbids split"})
	rs[0].Spec.Candidates[0].Families = []string{"string-read", "counter"}
	f := Build(now, ps, rs, SortHeat, 0)
	var b strings.Builder
	if err := Table(&b, f, 120); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"    list/stream: list or stream (order-bearing, e.g. a queue): order forbids split\n",
		"    string-read,counter\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}
