package agentlink

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/routing"
)

func sample() *Summary {
	return &Summary{Node: "node-a", Session: 42, Seq: 7, Policies: []PolicySummary{
		{Policy: "shop/checkout", Directive: 3, Unseen: Rates{Reads: 1.5, Writes: 0.25}, Total: Rates{Reads: 9000, Writes: 120},
			Keys: []KeyRates{{Key: "product:1", Reads: 812.125, RecentReads: 900.5, Bytes: 4096, Families: routing.FamStringRead | routing.FamKey},
				{Key: "likes:9", Writes: 40, RecentWrites: 38, Pinned: true, Families: routing.FamCounter}},
			BigKeys: []KeySize{{Key: "blob:20mb", Bytes: 20 << 20}, {Key: "product:1", Bytes: 4096}},
			Refused: []KeyCount{{Key: "likes:9", Count: 12}, {Key: "queue:jobs", Count: 1 << 40}},
			Moved:   []KeyMoved{{Key: "likes:9", Served: 4000, Failed: 120, BaseTotal: 90000, BaseFailed: 3}, {Key: "product:1", Served: 1 << 40}}},
		{Policy: "shop/empty"},
	}}
}

func TestSummaryRoundTrip(t *testing.T) {
	buf, err := MarshalSummary(nil, sample())
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalSummary(buf)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(sample(), got); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
}

// TestSummaryReadsVersion1: a summary of an agent not yet upgraded (no big
// keys, no families) still decodes; its keys' families are unknown.
func TestSummaryReadsVersion1(t *testing.T) {
	v1 := []byte{'H', 'F', 1, 0, 1, 'n', 7, 1, 1, 1, 'p', 0, 0, 0, 0, 0, 1, 1, 'k', 0xe8, 0x07, 0, 0, 0, 0, 0}
	got, err := UnmarshalSummary(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := &Summary{Node: "n", Session: 7, Seq: 1, Policies: []PolicySummary{{Policy: "p", Keys: []KeyRates{{Key: "k", Reads: 1, Families: routing.FamUnknown}}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// TestSummaryReadsVersion2: a summary of an agent that lists big keys but
// no families still decodes; its keys' families are unknown.
func TestSummaryReadsVersion2(t *testing.T) {
	v2 := []byte{'H', 'F', 2, 0, 1, 'n', 7, 1, 1, 1, 'p', 0, 0, 0, 0, 0, 1, 1, 'k', 0, 0xe8, 0x07, 0, 0, 0, 0, 0}
	got, err := UnmarshalSummary(v2)
	if err != nil {
		t.Fatal(err)
	}
	want := &Summary{Node: "n", Session: 7, Seq: 1, Policies: []PolicySummary{{Policy: "p", Keys: []KeyRates{{Key: "k", Writes: 1, Families: routing.FamUnknown}}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// TestSummaryReadsVersion3: a summary of an agent that lists families but
// no refusals still decodes, with none.
func TestSummaryReadsVersion3(t *testing.T) {
	v3 := []byte{'H', 'F', 3, 0, 1, 'n', 7, 1, 1, 1, 'p', 0, 0, 0, 0, 0, 1, 1, 'k', 0, 0xe8, 0x07, 0, 0, 0, 0, 4, 0}
	got, err := UnmarshalSummary(v3)
	if err != nil {
		t.Fatal(err)
	}
	want := &Summary{Node: "n", Session: 7, Seq: 1, Policies: []PolicySummary{{Policy: "p", Keys: []KeyRates{{Key: "k", Writes: 1, Families: routing.Families(4)}}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// TestSummaryReadsVersion4: a summary of an agent of the previous release
// (refusals, no move outcomes) still decodes, with none.
func TestSummaryReadsVersion4(t *testing.T) {
	v4 := []byte{'H', 'F', 4, 0, 1, 'n', 7, 1, 1, 1, 'p', 0, 0, 0, 0, 0, 1, 1, 'k', 0, 0xe8, 0x07, 0, 0, 0, 0, 4, 0, 1, 1, 'k', 3}
	got, err := UnmarshalSummary(v4)
	if err != nil {
		t.Fatal(err)
	}
	want := &Summary{Node: "n", Session: 7, Seq: 1, Policies: []PolicySummary{{Policy: "p", Keys: []KeyRates{{Key: "k", Writes: 1, Families: routing.Families(4)}},
		Refused: []KeyCount{{Key: "k", Count: 3}}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// TestSummaryBoundsRefused: more refused keys than
// MaxRefusedKeysPerPolicy is refused.
func TestSummaryBoundsRefused(t *testing.T) {
	s := sample()
	for i := range MaxRefusedKeysPerPolicy + 1 {
		s.Policies[0].Refused = append(s.Policies[0].Refused, KeyCount{Key: fmt.Sprint("k", i), Count: 1})
	}
	if _, err := MarshalSummary(nil, s); err == nil {
		t.Fatal("a summary with too many refused keys was marshalled")
	}
}

func TestSummaryRefusesBadInput(t *testing.T) {
	good, _ := MarshalSummary(nil, sample())
	for name, buf := range map[string][]byte{
		"empty":            nil,
		"bad magic":        append([]byte("XX"), good[2:]...),
		"bad version":      append([]byte{'H', 'F', 9, 0}, good[4:]...),
		"truncated":        good[:len(good)-3],
		"trailing byte":    append(append([]byte{}, good...), 0),
		"huge count":       {'H', 'F', 1, 0, 1, 'n', 0, 0, 0xff, 0xff, 0x03},
		"v1 with sizes":    append([]byte{'H', 'F', 1, 0}, good[4:]...),
		"v2 with families": append([]byte{'H', 'F', 2, 0}, good[4:]...),
		"too many big":     {'H', 'F', 2, 0, 1, 'n', 0, 0, 1, 1, 'p', 0, 0, 0, 0, 0, 0, 65},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := UnmarshalSummary(buf); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
	for name, s := range map[string]*Summary{
		"no node":   {},
		"empty key": {Node: "n", Policies: []PolicySummary{{Policy: "a/b", Keys: []KeyRates{{}}}}},
		"empty big": {Node: "n", Policies: []PolicySummary{{Policy: "a/b", BigKeys: []KeySize{{Bytes: 1}}}}},
		"many big":  {Node: "n", Policies: []PolicySummary{{Policy: "a/b", BigKeys: make([]KeySize, MaxBigKeysPerPolicy+1)}}},
	} {
		t.Run("marshal "+name, func(t *testing.T) {
			if _, err := MarshalSummary(nil, s); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

// FuzzUnmarshalSummary: any input is refused or decodes into a summary that
// encodes back to the same bytes (the format has one encoding per value).
func FuzzUnmarshalSummary(f *testing.F) {
	good, _ := MarshalSummary(nil, sample())
	f.Add(good)
	f.Add([]byte{'H', 'F', 1, 0})
	f.Add([]byte{'H', 'F', 1, 0, 1, 'n', 0, 0, 1, 1, 'p', 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := UnmarshalSummary(in)
		if err != nil {
			return
		}
		out, err := MarshalSummary(nil, s)
		if err != nil {
			t.Fatalf("decoded summary does not encode: %v", err)
		}
		back, err := UnmarshalSummary(out)
		if err != nil {
			t.Fatalf("re-encoded summary does not decode: %v", err)
		}
		if d := cmp.Diff(s, back); d != "" {
			t.Fatalf("unstable round trip:\n%s", d)
		}
	})
}

// TestSummaryInTheManagersVersion: to a manager that announces no summary
// version (the previous release's) a node agent writes version 3, which
// such a manager reads (it rejects a later version whole): the same
// summary without its refusals. To this release's manager, this version.
func TestSummaryInTheManagersVersion(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   int
	}{{"", 3}, {"3", 3}, {"4", 4}, {"5", 5}, {"6", SummaryVersion}, {"99", SummaryVersion}, {"x", 3}} {
		h := http.Header{}
		if tc.header != "" {
			h.Set(SummaryVersionHeader, tc.header)
		}
		if got := ManagerSummaryVersion(h); got != tc.want {
			t.Errorf("ManagerSummaryVersion(%q) = %d, want %d", tc.header, got, tc.want)
		}
	}
	s := &Summary{Node: "n", Session: 1, Seq: 2, Policies: []PolicySummary{{
		Policy: "ns/p", Keys: []KeyRates{{Key: "k", Reads: 5}},
		BigKeys: []KeySize{{Key: "b", Bytes: 9}}, Refused: []KeyCount{{Key: "k", Count: 3}},
		Moved: []KeyMoved{{Key: "k", Served: 50, Failed: 10, BaseTotal: 100, BaseFailed: 3,
			ReadServed: 5, ReadFailed: 5, BaseReads: 60, BaseReadsFailed: 2}},
	}, {Policy: "ns/q", Refused: []KeyCount{{Key: "r", Count: 1}}}}}
	b, err := MarshalSummaryVersion(nil, s, 3)
	if err != nil {
		t.Fatal(err)
	}
	if b[2] != 3 {
		t.Fatalf("version byte %d, want 3", b[2])
	}
	got, err := UnmarshalSummary(b)
	if err != nil {
		t.Fatal(err)
	}
	want := *s
	want.Policies = []PolicySummary{s.Policies[0], s.Policies[1]}
	want.Policies[0].Refused, want.Policies[1].Refused = nil, nil
	want.Policies[0].Moved = nil
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("version 3 round trip:\n got %+v\nwant %+v", got, &want)
	}
	// To a manager of the previous release (4): refusals, no move outcomes.
	if b, err = MarshalSummaryVersion(nil, s, 4); err != nil {
		t.Fatal(err)
	}
	want.Policies[0].Refused, want.Policies[1].Refused = s.Policies[0].Refused, s.Policies[1].Refused
	if got, err = UnmarshalSummary(b); err != nil || !reflect.DeepEqual(got, &want) {
		t.Errorf("version 4 round trip:\n got %+v, %v\nwant %+v", got, err, &want)
	}
	// To a manager of release 5: move outcomes, not the reads among them.
	if b, err = MarshalSummaryVersion(nil, s, 5); err != nil {
		t.Fatal(err)
	}
	want.Policies[0].Moved = []KeyMoved{{Key: "k", Served: 50, Failed: 10, BaseTotal: 100, BaseFailed: 3}}
	if got, err = UnmarshalSummary(b); err != nil || !reflect.DeepEqual(got, &want) {
		t.Errorf("version 5 round trip:\n got %+v, %v\nwant %+v", got, err, &want)
	}
	if b, err = MarshalSummaryVersion(nil, s, SummaryVersion); err != nil {
		t.Fatal(err)
	}
	if got, err = UnmarshalSummary(b); err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("version %d round trip: %+v, %v", SummaryVersion, got, err)
	}
}
