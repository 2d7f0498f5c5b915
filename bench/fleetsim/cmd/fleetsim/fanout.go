package main

import (
	"math"
	"slices"
	"time"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
)

// seenVersion is a routing table version as the orchestrator's own watch of
// the routing ConfigMap saw it first.
type seenVersion struct {
	// Policy is the policy's number (simproto.Config.PolicyName) when the
	// run has several.
	Policy  int       `json:"policy,omitempty"`
	Version int64     `json:"version"`
	At      time.Time `json:"at"`
	Keys    []string  `json:"keys"`
	// Hot are the hot keys' timers in the version's manager state (hops.go).
	Hot map[string]keyTimes `json:"hot,omitempty"`
}

// sidecarEvent is one simulated sidecar accepting a table version.
type sidecarEvent struct {
	sidecar int // node × sidecars per node + sidecar
	version int64
	at      time.Time
}

// percentile is the nearest-rank q-quantile of sorted (0 when empty).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Detection says whether and when a key of the hot event was published.
type Detection struct {
	Detected bool `json:"detected"`
	// Seconds is from the hot event's start to the first routing version
	// holding the key, as the orchestrator's watch saw it.
	Seconds float64 `json:"seconds,omitempty"`
	Version int64   `json:"version,omitempty"`
	// SidecarsReached counts sidecars that accepted that version or a later
	// one; SidecarsP50 and SidecarsP99 are seconds from the hot event's
	// start to that, over them.
	SidecarsReached int     `json:"sidecarsReached"`
	SidecarsP50     float64 `json:"sidecarsP50Seconds,omitempty"`
	SidecarsP99     float64 `json:"sidecarsP99Seconds,omitempty"`
	// Of and Count, in a run with several policies (each with its own hot
	// key): policies, and how many of them had their key detected. Detected
	// is then all of them, Seconds and Version the slowest's.
	Of    int `json:"of,omitempty"`
	Count int `json:"count,omitempty"`
}

// detect finds key's first version among versions (in version order).
func detect(versions []seenVersion, key string, hotAt time.Time, events []sidecarEvent) Detection {
	d, _ := detectSamples(versions, key, hotAt, events)
	return d
}

// detectSamples is detect with the sidecars' times (seconds from hotAt,
// sorted).
func detectSamples(versions []seenVersion, key string, hotAt time.Time, events []sidecarEvent) (Detection, []float64) {
	var d Detection
	for _, v := range versions {
		if slices.Contains(v.Keys, key) {
			d = Detection{Detected: true, Seconds: v.At.Sub(hotAt).Seconds(), Version: v.Version}
			break
		}
	}
	if !d.Detected {
		return d, nil
	}
	first := firstAccepted(events, d.Version)
	lat := make([]float64, 0, len(first))
	for _, t := range first {
		lat = append(lat, t.Sub(hotAt).Seconds())
	}
	slices.Sort(lat)
	d.SidecarsReached, d.SidecarsP50, d.SidecarsP99 = len(lat), percentile(lat, 0.5), percentile(lat, 0.99)
	return d, lat
}

// mergeDetections sums up the detections of several policies' keys (with
// their sidecars' times): detected when all are, as late as the slowest,
// the sidecars' percentiles over all of them.
func mergeDetections(ds []Detection, lats [][]float64) Detection {
	if len(ds) == 1 {
		return ds[0]
	}
	m := Detection{Detected: len(ds) > 0, Of: len(ds)}
	var all []float64
	for i, d := range ds {
		m.Detected = m.Detected && d.Detected
		if d.Detected {
			m.Count++
			m.Seconds, m.Version = max(m.Seconds, d.Seconds), max(m.Version, d.Version)
		}
		m.SidecarsReached += d.SidecarsReached
		all = append(all, lats[i]...)
	}
	slices.Sort(all)
	m.SidecarsP50, m.SidecarsP99 = percentile(all, 0.5), percentile(all, 0.99)
	return m
}

// FanOut is how long routing versions took from the routing ConfigMap (as
// the orchestrator's watch saw it change) to the simulated sidecars.
type FanOut struct {
	// Versions counts the versions published since ready; Samples the
	// (version, sidecar) acceptances timed against them.
	Versions int `json:"versions"`
	Samples  int `json:"samples"`
	// P50Ms, P99Ms and MaxMs are over Samples, in milliseconds. A sidecar
	// may see a version before the orchestrator does (both watch); those
	// samples are negative.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// LastVersion is the last version published and LastReached the
	// sidecars that accepted it.
	LastVersion int64 `json:"lastVersion"`
	LastReached int   `json:"lastReached"`
	// Unmatched counts acceptances of versions the orchestrator never saw
	// (published before its watch, or never in the ConfigMap).
	Unmatched int `json:"unmatched"`
}

// fanOut times every acceptance of a version published in [since, until)
// (until zero: no end).
func fanOut(versions []seenVersion, since, until time.Time, events []sidecarEvent) FanOut {
	f, _ := fanOutSamples(versions, since, until, events)
	return f
}

// fanOutSamples is fanOut with its samples (milliseconds, sorted).
func fanOutSamples(versions []seenVersion, since, until time.Time, events []sidecarEvent) (FanOut, []float64) {
	at := map[int64]time.Time{}
	all := map[int64]bool{}
	var f FanOut
	for _, v := range versions {
		all[v.Version] = true
		if !v.At.Before(since) && (until.IsZero() || v.At.Before(until)) {
			at[v.Version] = v.At
			f.Versions++
			f.LastVersion = max(f.LastVersion, v.Version)
		}
	}
	var ms []float64
	reached := map[int]bool{}
	for _, e := range events {
		if !all[e.version] {
			f.Unmatched++
			continue
		}
		t, ok := at[e.version]
		if !ok {
			continue
		}
		ms = append(ms, float64(e.at.Sub(t))/float64(time.Millisecond))
		if e.version == f.LastVersion {
			reached[e.sidecar] = true
		}
	}
	slices.Sort(ms)
	f.Samples, f.LastReached = len(ms), len(reached)
	f.P50Ms, f.P99Ms = percentile(ms, 0.5), percentile(ms, 0.99)
	if len(ms) > 0 {
		f.MaxMs = ms[len(ms)-1]
	}
	return f, ms
}

// mergeFanOuts sums up several policies' fan-outs (each policy has its own
// versions): percentiles over all samples, LastReached the sidecars that
// accepted their own policy's last version.
func mergeFanOuts(fs []FanOut, samples [][]float64) FanOut {
	if len(fs) == 1 {
		return fs[0]
	}
	var m FanOut
	var all []float64
	for i, f := range fs {
		m.Versions += f.Versions
		m.Unmatched += f.Unmatched
		m.LastVersion = max(m.LastVersion, f.LastVersion)
		m.LastReached += f.LastReached
		all = append(all, samples[i]...)
	}
	slices.Sort(all)
	m.Samples = len(all)
	m.P50Ms, m.P99Ms = percentile(all, 0.5), percentile(all, 0.99)
	if len(all) > 0 {
		m.MaxMs = all[len(all)-1]
	}
	return m
}

// eventsOf keeps the acceptances of policy k's sidecars (sidecar j of each
// node follows policy j mod the policies).
func eventsOf(events []sidecarEvent, k int, tc *simproto.Config) []sidecarEvent {
	if tc.Policies <= 1 {
		return events
	}
	var out []sidecarEvent
	for _, e := range events {
		if tc.SidecarPolicy(e.sidecar%tc.SidecarsPerNode) == k {
			out = append(out, e)
		}
	}
	return out
}

// sidecarsOf counts policy k's sidecars.
func sidecarsOf(k int, tc *simproto.Config) int {
	n := 0
	for j := range tc.SidecarsPerNode {
		if tc.SidecarPolicy(j) == k {
			n++
		}
	}
	return n * tc.Nodes
}

// firstAccepted is, per sidecar, when it first accepted version or a later
// one (a sidecar may skip a version that was quickly replaced).
func firstAccepted(events []sidecarEvent, version int64) map[int]time.Time {
	first := map[int]time.Time{}
	for _, e := range events {
		if e.version < version {
			continue
		}
		if t, ok := first[e.sidecar]; !ok || e.at.Before(t) {
			first[e.sidecar] = e.at
		}
	}
	return first
}
