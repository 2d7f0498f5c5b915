package agentlink

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// EventType says which field of an Event is set.
type EventType string

const (
	// TypePolicy carries a policy's Directive (new or changed).
	TypePolicy EventType = "policy"
	// TypePolicyRemoved names a policy the node agent must forget.
	TypePolicyRemoved EventType = "policyRemoved"
	// TypePods carries the full list of pods on the node that may send
	// counts, replacing the previous list.
	TypePods EventType = "pods"
	// TypeRouting carries a routing table for the node's sidecars.
	TypeRouting EventType = "routing"
	// TypeSynced ends the snapshot that opens every stream: the node agent
	// then knows everything the manager knows about its node.
	TypeSynced EventType = "synced"
	// TypeHeartbeat keeps an idle stream alive and shows the manager is.
	TypeHeartbeat EventType = "heartbeat"
)

// Event is one line of the watch stream.
type Event struct {
	Type      EventType  `json:"type"`
	Directive *Directive `json:"directive,omitempty"`
	Removed   string     `json:"removed,omitempty"`
	Pods      []Pod      `json:"pods,omitempty"`
	Routing   *Routing   `json:"routing,omitempty"`
}

// MaxEndpoints bounds a directive's Endpoints. An agent's capture filter
// holds 800 IPv4 endpoints over all its policies (nodeagent/capture), and a
// scope over that is refused whole; 256 leaves room for three policies
// whose Services are that large, and is far more than a Redis deployment
// has pods.
const MaxEndpoints = 256

// Directive is what a node agent needs to count one policy's traffic: the
// policy's detection parameters and the manager's current floor and pins.
type Directive struct {
	// Policy is "<namespace>/<name>".
	Policy string `json:"policy"`
	// Version grows with every change of this directive on one stream; the
	// agent echoes it in its summaries so the manager knows which floor and
	// pins a summary was computed with.
	Version uint64 `json:"version"`
	// Include and Exclude are the policy's key globs (spec.keys).
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
	// ReadsPerSecond and WritesPerSecond are the policy's cluster-wide
	// thresholds; they weigh reads against writes in the sketch.
	ReadsPerSecond  int64 `json:"readsPerSecond"`
	WritesPerSecond int64 `json:"writesPerSecond"`
	// WindowMillis and ReportIntervalMillis are spec.detection's.
	WindowMillis         int64 `json:"windowMillis"`
	ReportIntervalMillis int64 `json:"reportIntervalMillis"`
	// TopK is spec.detection.topK.
	TopK int32 `json:"topK"`
	// Floor: the agent lists every key whose rate on its node reaches it.
	Floor Rates `json:"floor"`
	// Alert: a key newly at or above it on the node makes the agent send its
	// summary at once instead of at the end of the interval. It is one node's
	// share of the warm band (threshold × (1 − hysteresis) ÷ nodes).
	Alert Rates `json:"alert"`
	// Pins are keys the agent counts exactly and always lists.
	Pins []string `json:"pins,omitempty"`
	// Endpoints are the "host:port" addresses of the policy's Redis, for
	// an agent that captures the traffic of pods without a sidecar
	// (docs/capture.md): spec.target.addresses (or a Sentinel target's
	// master and replicas) as given, whose names the agent resolves
	// itself, then, with the manager's capture on, the ClusterIPs and
	// ready pod endpoints of the Services they name, as IP:port. At most
	// MaxEndpoints.
	Endpoints []string `json:"endpoints,omitempty"`
	// Database is spec.target.database: captured commands on another
	// database are not counted, as a sidecar does not count them.
	Database int32 `json:"database,omitempty"`
	// Slots is the slot map of a Redis Cluster target, as the manager
	// last read it (CLUSTER SLOTS, every capacity sample): a capturing
	// agent counts a command only at a node that serves its key's slot,
	// so a command redirected by MOVED or ASK is counted once. Empty: not
	// a cluster, or not read yet.
	Slots []SlotRange `json:"slots,omitempty"`
}

// SlotRange is a range of hash slots and its nodes' "host:port"
// addresses, the master first, then its replicas.
type SlotRange struct {
	Start uint16   `json:"s"`
	End   uint16   `json:"e"`
	Nodes []string `json:"n"`
}

// EqualSlots reports whether two slot maps are the same.
func EqualSlots(a, b []SlotRange) bool {
	return slices.EqualFunc(a, b, func(x, y SlotRange) bool {
		return x.Start == y.Start && x.End == y.End && slices.Equal(x.Nodes, y.Nodes)
	})
}

// Pod is one pod address allowed to send counts, and the policy it was
// injected for: its sidecar may send counts and read routing for that
// policy only.
type Pod struct {
	IP     string `json:"ip"`
	Policy string `json:"policy"`
	// Name is "<namespace>/<name>", for logs and metrics only.
	Name string `json:"name,omitempty"`
	// Uninjected marks a pod of the policy's namespace that carries no
	// sidecar: it may send no counts and read no table, and an agent that
	// captures traffic counts what it sends to the policy's Redis
	// (docs/capture.md). A pod with the sidecar is never marked: its
	// sidecar counts it, so the capture must not.
	Uninjected bool `json:"uninjected,omitempty"`
}

// Routing is a policy's routing table as the manager published it (the
// routing.json of its ConfigMap).
type Routing struct {
	Policy  string          `json:"policy"`
	Version int64           `json:"version"`
	Table   json.RawMessage `json:"table"`
}

// Validate reports why an event read from the stream cannot be applied: an
// unknown type, or a type without the payload it names. The node agent
// drops such an event (and logs it) instead of acting on half of it.
func (e *Event) Validate() error {
	switch e.Type {
	case TypePolicy:
		if e.Directive == nil || e.Directive.Policy == "" {
			return errors.New("agentlink: policy event without a directive naming its policy")
		}
	case TypePolicyRemoved:
		if e.Removed == "" {
			return errors.New("agentlink: policyRemoved event without the policy's name")
		}
	case TypeRouting:
		if e.Routing == nil || e.Routing.Policy == "" || len(e.Routing.Table) == 0 {
			return errors.New("agentlink: routing event without a policy and its table")
		}
	case TypePods, TypeSynced, TypeHeartbeat:
	default:
		return fmt.Errorf("agentlink: unknown event type %q", e.Type)
	}
	return nil
}

// DecodeEvent reads one event of the stream and validates it. An event
// that decoded but is invalid gives an error wrapping ErrInvalidEvent; any
// other error means the stream cannot be read on.
func DecodeEvent(dec *json.Decoder) (Event, error) {
	var e Event
	if err := dec.Decode(&e); err != nil {
		return Event{}, err
	}
	if err := e.Validate(); err != nil {
		return e, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return e, nil
}

// ErrInvalidEvent marks an event that decoded but cannot be applied; the
// stream itself is still readable.
var ErrInvalidEvent = errors.New("invalid event")
