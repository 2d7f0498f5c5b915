package agentlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestEventValidate(t *testing.T) {
	tests := map[string]struct {
		ev   Event
		want bool // valid
	}{
		"policy":                 {Event{Type: TypePolicy, Directive: &Directive{Policy: "ns/p"}}, true},
		"policy without payload": {Event{Type: TypePolicy}, false},
		"policy without a name":  {Event{Type: TypePolicy, Directive: &Directive{}}, false},
		"removed":                {Event{Type: TypePolicyRemoved, Removed: "ns/p"}, true},
		"removed without a name": {Event{Type: TypePolicyRemoved}, false},
		"routing":                {Event{Type: TypeRouting, Routing: &Routing{Policy: "ns/p", Version: 3, Table: json.RawMessage(`{}`)}}, true},
		"routing without table":  {Event{Type: TypeRouting, Routing: &Routing{Policy: "ns/p"}}, false},
		"pods, none":             {Event{Type: TypePods}, true},
		"synced":                 {Event{Type: TypeSynced}, true},
		"heartbeat":              {Event{Type: TypeHeartbeat}, true},
		"unknown type":           {Event{Type: "gossip"}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := tc.ev.Validate(); (err == nil) != tc.want {
				t.Errorf("Validate() = %v, want valid %v", err, tc.want)
			}
		})
	}
}

// FuzzDecodeEvent: any bytes on the stream give events that are valid or
// an error, never a panic; a valid event encodes and decodes to itself.
func FuzzDecodeEvent(f *testing.F) {
	for _, ev := range []Event{
		{Type: TypePolicy, Directive: &Directive{Policy: "ns/p", Version: 2, Pins: []string{"k"}, Floor: Rates{Reads: 1.5}}},
		{Type: TypePods, Pods: []Pod{{IP: "198.18.0.7", Policy: "ns/p", Name: "ns/a"}}},
		{Type: TypeRouting, Routing: &Routing{Policy: "ns/p", Version: 9, Table: json.RawMessage(`{"version":9}`)}},
		{Type: TypeSynced},
	} {
		b, _ := json.Marshal(ev)
		f.Add(b)
	}
	f.Add([]byte(`{"type":"policy"}`))
	f.Add([]byte(`{"type":"pods","pods":[]}{"type":"policy","directive":{"policy":"a","pins":[]}}`))
	f.Add([]byte(`{"type":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		for range 8 {
			ev, err := DecodeEvent(dec)
			if errors.Is(err, ErrInvalidEvent) {
				continue // decoded, refused by Validate
			}
			if err != nil {
				return // the stream cannot be read on (io.EOF among others)
			}
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatalf("a valid event does not encode: %v", err)
			}
			again, err := DecodeEvent(json.NewDecoder(bytes.NewReader(b)))
			if err != nil {
				t.Fatalf("a valid event does not decode again: %v (%s)", err, b)
			}
			// An empty list is left out when encoded (omitempty).
			if d := cmp.Diff(normal(ev), normal(again), cmpopts.EquateEmpty()); d != "" {
				t.Fatalf("round trip (-first +again):\n%s", d)
			}
		}
	})
}

// normal writes a routing table's raw JSON the one way encoding/json
// writes it (compacted, HTML characters escaped), as it is after a round trip.
func normal(e Event) Event {
	if e.Routing != nil {
		r := *e.Routing
		var v any
		if json.Unmarshal(r.Table, &v) == nil {
			r.Table, _ = json.Marshal(v)
		}
		e.Routing = &r
	}
	return e
}
