package hub

import (
	"slices"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// Params are what the hub needs of a policy's spec.
type Params struct {
	Include, Exclude []string
	Thresholds       Thresholds
	Window           time.Duration
	ReportInterval   time.Duration
	TopK             int32
	// Endpoints and Database are the policy's Redis addresses and
	// database, for node agents that capture traffic (docs/capture.md);
	// the reconciler adds to the addresses what the Services they name
	// resolve to (controllers/endpoints).
	Endpoints []string
	Database  int32
	// Slots is the target's Redis Cluster slot map as the manager last
	// read it (nil: standalone, or not read yet).
	Slots []agentlink.SlotRange
}

// ParamsFromSpec takes a defaulted spec's detection parameters. The
// thresholds are the typed or fallback ones; with thresholds.auto the
// manager lowers them to the least threshold in force on any shard
// (decide.DetectionThresholds) before handing them over.
func ParamsFromSpec(spec *v1alpha1.HotKeyPolicySpec) Params {
	f := spec.Thresholds.InForce(v1alpha1.LearnedShard{})
	return Params{
		Include: slices.Clone(spec.Keys.Include),
		Exclude: slices.Clone(spec.Keys.Exclude),
		Thresholds: Thresholds{
			Reads:      f.ReadsPerSecond,
			Writes:     f.WritesPerSecond,
			Hysteresis: float64(spec.Thresholds.HysteresisPercent) / 100,
		},
		Window:         spec.Detection.Window.Duration,
		ReportInterval: spec.Detection.ReportInterval.Duration,
		TopK:           spec.Detection.TopK,
		Endpoints:      slices.Clone(spec.Target.Addresses),
		Database:       spec.Target.Database,
	}
}

func (p Params) equal(o Params) bool {
	return slices.Equal(p.Include, o.Include) && slices.Equal(p.Exclude, o.Exclude) && p.Thresholds == o.Thresholds &&
		p.Window == o.Window && p.ReportInterval == o.ReportInterval && p.TopK == o.TopK &&
		slices.Equal(p.Endpoints, o.Endpoints) && p.Database == o.Database && agentlink.EqualSlots(p.Slots, o.Slots)
}

// DefaultFloorFraction is s in the floor s × threshold ÷ nodes. Any s < 1
// guarantees that a key at its threshold is listed by at least one node (by
// pigeonhole, some node sees at least threshold ÷ nodes); a small s keeps the
// floors' share of the error bound (s × threshold) well inside the
// hysteresis band, so that the upper bound alone mitigates nothing below
// threshold × (1 − hysteresis) even before a pin makes it exact.
const DefaultFloorFraction = 0.1

// Floor is the rate at or above which every node lists a key: fraction of a
// node's share (threshold ÷ nodes) of each threshold. nodes is how many
// nodes host pods of the policy (at least 1).
func Floor(th Thresholds, nodes int, fraction float64) agentlink.Rates {
	n := float64(max(nodes, 1))
	return agentlink.Rates{Reads: fraction * float64(th.Reads) / n, Writes: fraction * float64(th.Writes) / n}
}

// Alert is one node's share of the warm band (threshold × (1 − hysteresis)
// ÷ nodes): a key newly over it on a node is sent at once.
func Alert(th Thresholds, nodes int) agentlink.Rates {
	n := float64(max(nodes, 1))
	return agentlink.Rates{Reads: (1 - th.Hysteresis) * float64(th.Reads) / n, Writes: (1 - th.Hysteresis) * float64(th.Writes) / n}
}

// directive builds a policy's directive.
func directive(id string, p Params, nodes int, fraction float64, pins []string, version uint64) agentlink.Directive {
	return agentlink.Directive{
		Policy: id, Version: version,
		Include: p.Include, Exclude: p.Exclude,
		ReadsPerSecond: p.Thresholds.Reads, WritesPerSecond: p.Thresholds.Writes,
		WindowMillis: p.Window.Milliseconds(), ReportIntervalMillis: p.ReportInterval.Milliseconds(),
		TopK:      p.TopK,
		Floor:     Floor(p.Thresholds, nodes, fraction),
		Alert:     Alert(p.Thresholds, nodes),
		Pins:      pins,
		Endpoints: p.Endpoints,
		Database:  p.Database,
		Slots:     p.Slots,
	}
}

// sameDirective reports whether two directives tell an agent the same thing
// (versions aside). Floors compare within 5%: node counts wobble during a
// rollout, and a floor a few percent off changes nothing that matters.
func sameDirective(a, b agentlink.Directive) bool {
	close := func(x, y float64) bool { return x == y || (x > 0 && y > 0 && x/y < 1.05 && y/x < 1.05) }
	return a.Policy == b.Policy && slices.Equal(a.Include, b.Include) && slices.Equal(a.Exclude, b.Exclude) &&
		a.ReadsPerSecond == b.ReadsPerSecond && a.WritesPerSecond == b.WritesPerSecond &&
		a.WindowMillis == b.WindowMillis && a.ReportIntervalMillis == b.ReportIntervalMillis && a.TopK == b.TopK &&
		close(a.Floor.Reads, b.Floor.Reads) && close(a.Floor.Writes, b.Floor.Writes) &&
		close(a.Alert.Reads, b.Alert.Reads) && close(a.Alert.Writes, b.Alert.Writes) && slices.Equal(a.Pins, b.Pins) &&
		slices.Equal(a.Endpoints, b.Endpoints) && a.Database == b.Database && agentlink.EqualSlots(a.Slots, b.Slots)
}
