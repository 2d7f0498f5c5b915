package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// apiSnapshot is what kube-apiserver's /metrics says at one instant.
type apiSnapshot struct {
	at time.Time
	// requests is apiserver_request_total by "VERB resource[/subresource]",
	// summed over codes, scopes and versions. Requests to non-resource URLs
	// (discovery, /metrics itself, /healthz) are left out: the orchestrator's
	// scrapes are among them.
	requests map[string]float64
	// watchEvents and watchBytes are apiserver_watch_events_total and
	// apiserver_watch_events_sizes_sum by resource: what the API server sent
	// to watchers.
	watchEvents, watchBytes map[string]float64
	// longRunning is apiserver_longrunning_requests by "VERB resource": the
	// watches open now.
	longRunning map[string]float64
}

// mutatingVerbs are the verbs that change state, as apiserver_request_total
// spells them (server-side apply is APPLY).
var mutatingVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

func requestKey(verb, resource, subresource string) string {
	if subresource != "" {
		resource += "/" + subresource
	}
	return verb + " " + resource
}

// parseAPIMetrics reads the metrics text format.
func parseAPIMetrics(r io.Reader, at time.Time) (*apiSnapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver metrics: %w", err)
	}
	s := &apiSnapshot{at: at, requests: map[string]float64{}, watchEvents: map[string]float64{}, watchBytes: map[string]float64{}, longRunning: map[string]float64{}}
	each := func(name string, f func(l map[string]string, m *dto.Metric)) {
		fam := fams[name]
		if fam == nil {
			return
		}
		for _, m := range fam.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			f(l, m)
		}
	}
	each("apiserver_request_total", func(l map[string]string, m *dto.Metric) {
		if l["resource"] != "" {
			s.requests[requestKey(l["verb"], l["resource"], l["subresource"])] += m.GetCounter().GetValue()
		}
	})
	each("apiserver_watch_events_total", func(l map[string]string, m *dto.Metric) {
		s.watchEvents[l["resource"]] += m.GetCounter().GetValue()
	})
	each("apiserver_watch_events_sizes", func(l map[string]string, m *dto.Metric) {
		s.watchBytes[l["resource"]] += m.GetHistogram().GetSampleSum()
	})
	each("apiserver_longrunning_requests", func(l map[string]string, m *dto.Metric) {
		if v := m.GetGauge().GetValue(); v > 0 && l["resource"] != "" {
			s.longRunning[requestKey(l["verb"], l["resource"], l["subresource"])] += v
		}
	})
	return s, nil
}

// scrapeAPIServer reads kube-apiserver's /metrics with the admin config.
func scrapeAPIServer(ctx context.Context, rc rest.Interface) (*apiSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	at := time.Now()
	body, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	return parseAPIMetrics(strings.NewReader(string(body)), at)
}

// APIRates are the API server's request and watch rates over one phase.
type APIRates struct {
	Seconds float64 `json:"seconds"`
	// Requests is requests per second by "VERB resource".
	Requests map[string]float64 `json:"requestsPerSecond"`
	Total    float64            `json:"totalPerSecond"`
	Mutating float64            `json:"mutatingPerSecond"`
	// MutatingLeases is the part of Mutating on leases: leader election
	// (heatsink's manager renews every 2 s) and kube-apiserver's own
	// identity lease (every 10 s), which /metrics cannot tell apart.
	MutatingLeases float64 `json:"mutatingLeasesPerSecond"`
	// WatchEvents and WatchBytes are what the API server sent its watchers
	// per second, by resource.
	WatchEvents     map[string]float64 `json:"watchEventsPerSecond"`
	WatchBytes      map[string]float64 `json:"watchBytesPerSecond"`
	WatchEventTotal float64            `json:"watchEventsTotalPerSecond"`
	WatchByteTotal  float64            `json:"watchBytesTotalPerSecond"`
}

// rates turns two snapshots into per-second rates. A counter that went down
// (the API server restarted) counts from zero.
func rates(a, b *apiSnapshot) APIRates {
	secs := b.at.Sub(a.at).Seconds()
	r := APIRates{Seconds: secs, Requests: map[string]float64{}, WatchEvents: map[string]float64{}, WatchBytes: map[string]float64{}}
	if secs <= 0 {
		return r
	}
	delta := func(before, after map[string]float64, into map[string]float64) float64 {
		total := 0.0
		for k, v := range after {
			d := v - before[k]
			if d < 0 {
				d = v
			}
			if d > 0 {
				into[k] = d / secs
				total += d / secs
			}
		}
		return total
	}
	r.Total = delta(a.requests, b.requests, r.Requests)
	for k, v := range r.Requests {
		verb, resource, _ := strings.Cut(k, " ")
		if mutatingVerbs[verb] {
			r.Mutating += v
			if resource == "leases" {
				r.MutatingLeases += v
			}
		}
	}
	r.WatchEventTotal = delta(a.watchEvents, b.watchEvents, r.WatchEvents)
	r.WatchByteTotal = delta(a.watchBytes, b.watchBytes, r.WatchBytes)
	return r
}

// topRequests lists the n highest request rates as "VERB resource rate",
// highest first, ties by name.
func topRequests(m map[string]float64, n int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%s %s", k, fmtRate(m[k])))
	}
	return out
}

// fmtRate prints a rate with two significant decimals under 10.
func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// HubPush is the fleet manager's own timing of its routing pushes
// (heatsink_manager_fleet_routing_push_seconds: from a new table's push to
// its line flushed onto one agent's stream, one sample per agent), over the
// whole run.
type HubPush struct {
	Samples uint64  `json:"samples"`
	MeanMs  float64 `json:"meanMs"`
	// P50Ms and P99Ms are the upper bounds of the buckets holding those
	// ranks (Inf beyond the last bucket).
	P50Ms float64 `json:"p50LeMs"`
	P99Ms float64 `json:"p99LeMs"`
}

// hubPushMetric is the manager's histogram HubPush reads.
const hubPushMetric = "heatsink_manager_fleet_routing_push_seconds"

// parseHubPush reads HubPush from a manager's metrics; nil when it has no
// such histogram (a design without the hub) or no sample.
func parseHubPush(r io.Reader) (*HubPush, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("manager metrics: %w", err)
	}
	fam := fams[hubPushMetric]
	if fam == nil || len(fam.GetMetric()) != 1 || fam.GetMetric()[0].GetHistogram() == nil {
		return nil, nil
	}
	h := fam.GetMetric()[0].GetHistogram()
	n := h.GetSampleCount()
	if n == 0 {
		return nil, nil
	}
	hp := &HubPush{Samples: n, MeanMs: 1000 * h.GetSampleSum() / float64(n), P50Ms: math.Inf(1), P99Ms: math.Inf(1)}
	rank := func(q float64) uint64 { return uint64(math.Ceil(q * float64(n))) }
	for _, b := range h.GetBucket() { // cumulative, in order
		if b.GetCumulativeCount() >= rank(0.5) && math.IsInf(hp.P50Ms, 1) {
			hp.P50Ms = 1000 * b.GetUpperBound()
		}
		if b.GetCumulativeCount() >= rank(0.99) && math.IsInf(hp.P99Ms, 1) {
			hp.P99Ms = 1000 * b.GetUpperBound()
		}
	}
	return hp, nil
}
