package decide

import (
	"fmt"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// FuzzDecide drives Decide with arbitrary sequences of rates and time steps
// (and arbitrary folds completing) and checks that every table it produces
// passes routing's Validate, that generations are only ever appended after
// the current epoch, and that nothing panics.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{0, 200, 10, 1, 0, 255, 30, 2, 3, 0, 0, 90})
	f.Add([]byte{7, 7, 7, 7, 100, 100, 100, 100, 0, 0, 0, 0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) {
			s.Capacity.MaxMitigatedKeys = 3
			s.Mitigations.PreAggregate.Enabled = ptrTrue()
		})
		now := t0
		var st State
		var cur *routing.Table
		for len(data) >= 4 {
			step, key, reads, writes := data[0], data[1]%5, data[2], data[3]
			data = data[4:]
			now = now.Add(time.Duration(step) * time.Second)
			obs := map[string]Observation{
				fmt.Sprintf("k%d", key): {Families: strFams, ReadsPerSecond: int64(reads) * 100, WritesPerSecond: int64(writes) * 1000},
			}
			out := Decide(Input{Now: now, Spec: spec, Observations: obs, State: st, Current: cur, Margin: 10 * time.Second})
			tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: 60000, Entries: out.Entries}
			if err := tbl.Validate(); err != nil {
				t.Fatalf("invalid table: %v\n%+v", err, out.Entries)
			}
			e := routing.EpochAt(now, 60000)
			for _, en := range out.Entries {
				if en.Split == nil {
					continue
				}
				var old *routing.Entry
				if cur != nil {
					old = cur.Lookup(en.Key)
				}
				for _, g := range en.Split.Generations {
					if g.FromEpoch <= e && !listed(old, g) {
						t.Fatalf("generation %+v of %s takes effect without announcement (epoch %d)", g, en.Key, e)
					}
				}
			}
			folded := map[GenRef]bool{}
			for i, ref := range out.Folds {
				if step%2 == 0 || i == 0 {
					folded[ref] = true
				}
			}
			entries := Prune(now, 60000, out.Entries, folded)
			tbl.Entries = entries
			if err := tbl.Validate(); err != nil {
				t.Fatalf("invalid pruned table: %v", err)
			}
			st, cur = out.State, tbl
		}
	})
}

func listed(e *routing.Entry, g routing.Generation) bool {
	if e == nil || e.Split == nil {
		return false
	}
	for _, h := range e.Split.Generations {
		if h == g {
			return true
		}
	}
	return false
}

func ptrTrue() *bool { b := true; return &b }
