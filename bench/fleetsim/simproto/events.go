package simproto

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Event kinds a node simulator prints, one JSON object per line on stdout.
const (
	// EventProgress ({"event":"progress","at":T,"stats":{...}}) says how far
	// the start-up got; printed about every second until ready, so that a
	// simulator that never gets ready still says what it reached.
	EventProgress = "progress"
	// EventReady ({"event":"ready","at":T}): every node and sidecar is up;
	// the phases are timed from here.
	EventReady = "ready"
	// EventPhase ({"event":"phase","phase":P,"at":T}) marks the start of a
	// phase: PhaseWarmup, PhaseHot, PhaseRest.
	EventPhase = "phase"
	// EventRouting ({"event":"routing","node":i,"sidecar":j,"version":v,
	// "at":T,"keys":[...]}): sidecar j of node i accepted routing table
	// version v at T. "keys" (the table's entries' keys) may be left out
	// when an earlier line of the same version carried them, so 10,000
	// sidecars cost one key list per version.
	EventRouting = "routing"
	// EventAgentRouting ({"event":"agentRouting","node":i,"policy":k,
	// "version":v,"at":T}): node i's agent stored policy k's (the policy's
	// number, Config.PolicyName) routing table version v at T, before any
	// of its sidecars could fetch it. Optional: a design whose nodes have no
	// agent between the manager and the sidecars prints none. It separates
	// the one centralised step of the fan-out (manager → every node agent)
	// from the per-node one (agent → its sidecars).
	EventAgentRouting = "agentRouting"
	// EventError ({"event":"error","at":T,"message":M}): the simulator
	// gives up (say, not ready within --start-timeout); it exits after it.
	EventError = "error"
	// EventDone ({"event":"done","at":T,"stats":{...}}): the run is over;
	// the last line. The simulator keeps its nodes and sidecars up after it
	// until SIGTERM or SIGINT (at most Linger), so that the orchestrator
	// reads the API server's counters before hundreds of watches close.
	EventDone = "done"
)

// Linger bounds how long a simulator stays up after its done event.
const Linger = time.Minute

// Phases of a run, in order.
const (
	PhaseWarmup = "warmup"
	PhaseHot    = "hot"
	PhaseRest   = "rest"
)

// Event is one line of a node simulator's stdout. At is Unix nanoseconds on
// the machine's clock, which the orchestrator shares.
type Event struct {
	Event   string             `json:"event"`
	At      int64              `json:"at"`
	Phase   string             `json:"phase,omitempty"`
	Node    int                `json:"node"`
	Sidecar int                `json:"sidecar"`
	Policy  int                `json:"policy"`
	Version int64              `json:"version,omitempty"`
	Keys    []string           `json:"keys,omitempty"`
	Message string             `json:"message,omitempty"`
	Stats   map[string]float64 `json:"stats,omitempty"`
}

// Time is At as a time.
func (e *Event) Time() time.Time { return time.Unix(0, e.At) }

// ParseEvent reads one line. It refuses what the orchestrator could not use:
// an unknown event, a missing time, a routing line without its sidecar or
// version, an agent's routing line without its node, policy or version, a
// phase line without a known phase. Fields an event does not carry read 0.
func ParseEvent(line []byte) (Event, error) {
	e := Event{Node: -1, Sidecar: -1, Policy: -1}
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("node simulator line: %w", err)
	}
	if e.At <= 0 {
		return Event{}, fmt.Errorf("node simulator %q event: missing or non-positive \"at\"", e.Event)
	}
	switch e.Event {
	case EventProgress, EventReady, EventDone, EventError:
	case EventPhase:
		if e.Phase != PhaseWarmup && e.Phase != PhaseHot && e.Phase != PhaseRest {
			return Event{}, fmt.Errorf("node simulator phase event: unknown phase %q", e.Phase)
		}
	case EventRouting:
		if e.Node < 0 || e.Sidecar < 0 || e.Version <= 0 {
			return Event{}, errors.New(`node simulator routing event: want "node" >= 0, "sidecar" >= 0 and "version" > 0`)
		}
	case EventAgentRouting:
		if e.Node < 0 || e.Policy < 0 || e.Version <= 0 {
			return Event{}, errors.New(`node simulator agentRouting event: want "node" >= 0, "policy" >= 0 and "version" > 0`)
		}
	default:
		return Event{}, fmt.Errorf("node simulator line: unknown event %q", e.Event)
	}
	if e.Event != EventRouting && e.Event != EventAgentRouting {
		e.Node = 0
	}
	if e.Event != EventRouting {
		e.Sidecar = 0
	}
	if e.Event != EventAgentRouting {
		e.Policy = 0
	}
	if e.Event != EventRouting && e.Event != EventAgentRouting {
		e.Version = 0
	}
	if e.Event != EventRouting {
		e.Keys = nil
	}
	if e.Event != EventPhase {
		e.Phase = ""
	}
	if e.Event != EventError {
		e.Message = ""
	}
	if e.Event != EventProgress && e.Event != EventDone {
		e.Stats = nil
	}
	return e, nil
}

// Writer prints events as JSON lines. It is safe for concurrent use (every
// simulated sidecar calls Routing from its own goroutine); lines are
// buffered and flushed at least every FlushEvery, and at once for the events
// the orchestrator waits on (ready, phase, error, done).
type Writer struct {
	mu        sync.Mutex
	w         *bufio.Writer
	buf       []byte
	keyed     map[int64]bool // versions whose keys were printed
	dirty     bool
	err       error
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// FlushEvery bounds how long a routing line waits in the buffer. It does
// not delay the measurement: each line carries the time of its event.
const FlushEvery = 50 * time.Millisecond

// NewWriter starts a writer on w; Close stops it.
func NewWriter(w io.Writer) *Writer {
	wr := &Writer{w: bufio.NewWriterSize(w, 256<<10), keyed: map[int64]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go wr.flusher()
	return wr
}

func (w *Writer) flusher() {
	defer close(w.done)
	t := time.NewTicker(FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			if w.dirty {
				w.flushLocked()
			}
			w.mu.Unlock()
		}
	}
}

func (w *Writer) flushLocked() {
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	w.dirty = false
}

func (w *Writer) line(flush bool, build func(b []byte) []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = build(w.buf[:0])
	w.buf = append(w.buf, '\n')
	if _, err := w.w.Write(w.buf); err != nil && w.err == nil {
		w.err = err
	}
	w.dirty = true
	if flush {
		w.flushLocked()
	}
}

func head(b []byte, event string, at time.Time) []byte {
	b = append(b, `{"event":"`...)
	b = append(b, event...)
	b = append(b, `","at":`...)
	return strconv.AppendInt(b, at.UnixNano(), 10)
}

func appendJSON(b []byte, v any) []byte {
	data, err := json.Marshal(v)
	if err != nil { // strings, string slices and float maps always marshal
		panic(err)
	}
	return append(b, data...)
}

// Ready prints the ready event.
func (w *Writer) Ready(at time.Time) {
	w.line(true, func(b []byte) []byte { return append(head(b, EventReady, at), '}') })
}

// Phase prints the start of a phase.
func (w *Writer) Phase(phase string, at time.Time) {
	w.line(true, func(b []byte) []byte {
		b = append(head(b, EventPhase, at), `,"phase":`...)
		return append(appendJSON(b, phase), '}')
	})
}

// Routing prints that sidecar j of node i accepted table version at at; keys
// are printed with the first line of each version only.
func (w *Writer) Routing(node, sidecar int, version int64, keys []string, at time.Time) {
	w.line(false, func(b []byte) []byte {
		b = append(head(b, EventRouting, at), `,"node":`...)
		b = strconv.AppendInt(b, int64(node), 10)
		b = append(b, `,"sidecar":`...)
		b = strconv.AppendInt(b, int64(sidecar), 10)
		b = append(b, `,"version":`...)
		b = strconv.AppendInt(b, version, 10)
		if !w.keyed[version] {
			w.keyed[version] = true
			if keys == nil {
				keys = []string{}
			}
			b = append(b, `,"keys":`...)
			b = appendJSON(b, keys)
		}
		return append(b, '}')
	})
}

// AgentRouting prints that node's agent stored policy's routing table
// version at at.
func (w *Writer) AgentRouting(node, policy int, version int64, at time.Time) {
	w.line(false, func(b []byte) []byte {
		b = append(head(b, EventAgentRouting, at), `,"node":`...)
		b = strconv.AppendInt(b, int64(node), 10)
		b = append(b, `,"policy":`...)
		b = strconv.AppendInt(b, int64(policy), 10)
		b = append(b, `,"version":`...)
		b = strconv.AppendInt(b, version, 10)
		return append(b, '}')
	})
}

// Progress prints start-up progress.
func (w *Writer) Progress(at time.Time, stats map[string]float64) {
	w.stats(EventProgress, at, stats, true)
}

// Done prints the last line, with the run's counters.
func (w *Writer) Done(at time.Time, stats map[string]float64) {
	w.stats(EventDone, at, stats, true)
}

func (w *Writer) stats(event string, at time.Time, stats map[string]float64, flush bool) {
	w.line(flush, func(b []byte) []byte {
		b = append(head(b, event, at), `,"stats":{`...)
		first := true
		for _, k := range slices.Sorted(maps.Keys(stats)) {
			v := stats[k]
			if math.IsNaN(v) || math.IsInf(v, 0) { // JSON has no such numbers
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendJSON(b, k)
			b = append(b, ':')
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
		}
		return append(b, "}}"...)
	})
}

// Error prints that the simulator gives up, and why.
func (w *Writer) Error(at time.Time, message string) {
	w.line(true, func(b []byte) []byte {
		b = append(head(b, EventError, at), `,"message":`...)
		return append(appendJSON(b, message), '}')
	})
}

// Close flushes and stops the writer; it returns the first write error.
func (w *Writer) Close() error {
	w.closeOnce.Do(func() { close(w.stop) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	return w.err
}
