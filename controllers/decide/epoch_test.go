package decide

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/routing"
)

func TestGeneration(t *testing.T) {
	g := func(from int64, n int32) routing.Generation { return routing.Generation{FromEpoch: from, Shards: n} }
	entries := []routing.Entry{ // sorted by key, as in a table
		{Key: "a", Split: &routing.Split{Generations: []routing.Generation{g(100, 4), g(102, 8)}}},
		{Key: "b", Coalesce: true},
	}
	for name, tc := range map[string]struct {
		ref    GenRef
		want   routing.Generation
		wantOK bool
	}{
		"the first generation":          {ref: GenRef{Key: "a", FromEpoch: 100}, want: g(100, 4), wantOK: true},
		"a later generation":            {ref: GenRef{Key: "a", FromEpoch: 102}, want: g(102, 8), wantOK: true},
		"a generation no longer listed": {ref: GenRef{Key: "a", FromEpoch: 101}},
		"a key not split":               {ref: GenRef{Key: "b", FromEpoch: 100}},
		"a key not in the table":        {ref: GenRef{Key: "c", FromEpoch: 100}},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := Generation(entries, tc.ref)
			if ok != tc.wantOK {
				t.Errorf("found = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("generation (-want +got):\n%s", diff)
			}
		})
	}
}
