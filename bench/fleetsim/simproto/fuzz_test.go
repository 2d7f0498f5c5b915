package simproto

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseEvent: whatever ParseEvent accepts, the Writer prints back as a
// line ParseEvent reads to the same event (keys aside, which the Writer
// prints once per version).
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"event":"ready","at":1}`,
		`{"event":"routing","node":1,"sidecar":2,"version":3,"at":4,"keys":["a"]}`,
		`{"event":"phase","phase":"hot","at":5}`,
		`{"event":"done","at":6,"stats":{"x":1.5}}`,
		`{"event":"error","at":7,"message":"m"}`,
		`{"event":"agentRouting","node":1,"policy":0,"version":3,"at":8}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseEvent(line)
		if err != nil {
			return
		}
		var out bytes.Buffer
		w := NewWriter(&out)
		at := time.Unix(0, e.At)
		switch e.Event {
		case EventReady:
			w.Ready(at)
		case EventPhase:
			w.Phase(e.Phase, at)
		case EventRouting:
			w.Routing(e.Node, e.Sidecar, e.Version, e.Keys, at)
		case EventAgentRouting:
			w.AgentRouting(e.Node, e.Policy, e.Version, at)
		case EventError:
			w.Error(at, e.Message)
		case EventProgress:
			w.Progress(at, e.Stats)
		case EventDone:
			w.Done(at, e.Stats)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(&out)
		sc.Buffer(nil, 1<<20)
		if !sc.Scan() {
			t.Fatalf("no line written for %s", line)
		}
		got, err := ParseEvent(sc.Bytes())
		if err != nil {
			t.Fatalf("written line %s: %v", sc.Text(), err)
		}
		if e.Event == EventRouting && e.Keys == nil {
			e.Keys = []string{}
		}
		if len(e.Stats) == 0 && (e.Event == EventProgress || e.Event == EventDone) {
			e.Stats = nil
			if len(got.Stats) == 0 {
				got.Stats = nil
			}
		}
		if diff := cmp.Diff(e, got); diff != "" {
			t.Errorf("%s: round trip (-parsed +reparsed):\n%s", line, diff)
		}
	})
}
