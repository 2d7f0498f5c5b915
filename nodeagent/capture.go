package nodeagent

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// The agent's side of the passive capture (package capture, docs/capture.md):
// it tells the capture what to count — each policy's Redis endpoints
// (from the directive, names resolved here) and the node's pods without a
// sidecar — and counts what the capture hands back into the same sketch as
// a sidecar's batches (count), for the policy whose endpoint the command
// went to, in the name of the pod that sent it.

// captureRefresh is how often the endpoints' names are resolved again (a
// Service's address does not change; a headless name's may).
const captureRefresh = 30 * time.Second

// captureLoop keeps the capture's scope current until ctx ends.
func (d *Agent) captureLoop(ctx context.Context) {
	t := time.NewTicker(captureRefresh)
	defer t.Stop()
	for {
		d.applyScope(ctx)
		select {
		case <-ctx.Done():
			return
		case <-d.scopeChanged:
		case <-t.C:
		}
	}
}

// scopeDirty asks captureLoop to rebuild the scope (pods or policies
// changed). It never blocks.
func (d *Agent) scopeDirty() {
	if d.scopeChanged == nil {
		return
	}
	select {
	case d.scopeChanged <- struct{}{}:
	default:
	}
}

// applyScope builds the scope from the policies and pods the agent knows.
func (d *Agent) applyScope(ctx context.Context) {
	var s capture.Scope
	for _, p := range d.policyStates() {
		p.mu.Lock()
		eps, db, slots := slices.Clone(p.dir.Endpoints), int(p.dir.Database), slices.Clone(p.dir.Slots)
		p.mu.Unlock()
		s.Targets = append(s.Targets, capture.Target{
			Policy: p.id, Namespace: p.namespace, Database: db,
			Endpoints: d.resolveEndpoints(ctx, eps),
			Slots:     d.resolveSlots(ctx, slots),
		})
	}
	slices.SortFunc(s.Targets, func(a, b capture.Target) int {
		if a.Policy < b.Policy {
			return -1
		}
		if a.Policy > b.Policy {
			return 1
		}
		return 0
	})
	s.Pods = d.sources.uninjectedPods()
	if err := d.opts.Capture.SetScope(s); err != nil {
		d.log.Error(err, "capture scope refused")
	}
}

// resolveEndpoints turns "host:port" addresses into IP endpoints; a name
// that does not resolve is skipped (and tried again at the next refresh).
// Names are looked up at most once per captureRefresh: the scope is
// rebuilt at every change of the node's pods, which must not cost a DNS
// query each.
func (d *Agent) resolveEndpoints(ctx context.Context, addrs []string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range addrs {
		host, ps, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(ps, 10, 16)
		if err != nil {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
			continue
		}
		ips, err := d.lookupCached(ctx, host)
		if err != nil {
			d.log.V(1).Info("capture endpoint did not resolve", "host", host, "err", err.Error())
			continue
		}
		for _, s := range ips {
			if ip, err := netip.ParseAddr(s); err == nil {
				out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
			}
		}
	}
	return out
}

// resolveSlots turns the directive's slot map into the capture's. A node
// named by a host name takes its first address; a range whose master does
// not resolve is left out (its slots are then counted nowhere until the
// next refresh: a cluster node's name that does not resolve cannot be
// where the pods' packets go either).
func (d *Agent) resolveSlots(ctx context.Context, ranges []agentlink.SlotRange) []capture.SlotRange {
	var out []capture.SlotRange
	for _, r := range ranges {
		var nodes []netip.AddrPort
		for _, n := range r.Nodes {
			if a := d.resolveEndpoints(ctx, []string{n}); len(a) > 0 {
				nodes = append(nodes, a[0])
			} else if len(nodes) == 0 {
				break // the master
			}
		}
		if len(nodes) == 0 {
			continue
		}
		out = append(out, capture.SlotRange{Start: r.Start, End: r.End, Master: nodes[0], Replicas: nodes[1:]})
	}
	return out
}

// resolved is a name's addresses as looked up at a time.
type resolved struct {
	ips []string
	at  time.Time
}

// lookupCached resolves host, from the cache if looked up less than
// captureRefresh ago. Only captureLoop calls it.
func (d *Agent) lookupCached(ctx context.Context, host string) ([]string, error) {
	if r, ok := d.resolvedNames[host]; ok && time.Since(r.at) < captureRefresh {
		return r.ips, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ips, err := d.opts.Resolve(rctx, host)
	cancel()
	if err != nil {
		return nil, err
	}
	if d.resolvedNames == nil {
		d.resolvedNames = map[string]resolved{}
	}
	d.resolvedNames[host] = resolved{ips: ips, at: time.Now()}
	return ips, nil
}

// countCaptured counts what the capture aggregated for policy.
func (d *Agent) countCaptured(policy string, entries []sidecarlink.Entry) {
	d.mu.RLock()
	p := d.policies[policy]
	d.mu.RUnlock()
	if p == nil {
		return
	}
	d.count(p, d.opts.Clock.Now(), entries)
	d.captured.Add(uint64(len(entries)))
}

// RegisterCaptureMetrics exposes the capture's counters (read at scrape
// time) and whether it runs (running). New registers them for an agent with
// a capture; test/monitoring registers them on their own, to list every
// metric a node agent can export without opening a packet socket.
func RegisterCaptureMetrics(reg prometheus.Registerer, c *capture.Capture, running func() bool) error {
	counter := func(name, help string, f func(capture.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(c.Stats())) })
	}
	for _, m := range []prometheus.Collector{
		counter("heatsink_node_agent_capture_packets_total", "Packets the capture's filter passed (client to a policy's Redis).",
			func(s capture.Stats) uint64 { return s.Packets }),
		counter("heatsink_node_agent_capture_commands_total", "Commands the capture parsed.",
			func(s capture.Stats) uint64 { return s.Commands }),
		counter("heatsink_node_agent_capture_counted_total", "Captured commands counted for a policy (before scaling by the sampling).",
			func(s capture.Stats) uint64 { return s.Counted }),
		counter("heatsink_node_agent_capture_resyncs_total", "Command boundaries the capture found again after a lost packet or bytes it could not parse.",
			func(s capture.Stats) uint64 { return s.Resyncs }),
		counter("heatsink_node_agent_capture_not_served_total", "Captured commands to a Redis Cluster node that does not serve their key's slot by the manager's slot map, not counted (MOVED/ASK retries count where served; a high rate means the map is behind the cluster).",
			func(s capture.Stats) uint64 { return s.NotServed }),
		counter("heatsink_node_agent_capture_gaps_total", "Holes in captured streams (packets lost or held too long out of order).",
			func(s capture.Stats) uint64 { return s.Gaps }),
		counter("heatsink_node_agent_capture_kernel_drops_total", "Packets the kernel dropped because the capture fell behind (its buffer was full).",
			func(s capture.Stats) uint64 { return s.KernelDrops }),
		counter("heatsink_node_agent_capture_reply_packets_total", "Reply packets of the connections whose replies the capture follows (--capture-reply-sample).",
			func(s capture.Stats) uint64 { return s.ReplyPackets }),
		counter("heatsink_node_agent_capture_replies_matched_total", "Replies matched to their request (a read's size counted for its key: big keys by read size).",
			func(s capture.Stats) uint64 { return s.Replies + s.ReplyEstimated }),
		counter("heatsink_node_agent_capture_replies_lost_total", "Times reply matching stopped on a connection until its streams were in step again (a hole, a header the kernel did not copy, a reply out of step, a bound).",
			func(s capture.Stats) uint64 { return s.ReplyLost }),
		counter("heatsink_node_agent_capture_flows_refused_total", "Connections not tracked because the flow table was full.",
			func(s capture.Stats) uint64 { return s.FlowsRefused }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heatsink_node_agent_capture_running", Help: "1 while the configured capture runs, 0 once it stopped (its interface went down or away, a socket error): the agent is then not ready."},
			func() float64 {
				if running() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heatsink_node_agent_capture_flows", Help: "Connections the capture tracks."},
			func() float64 { return float64(c.Stats().Flows) }),
		// The scope in force, so that an operator (and the e2e) can tell a
		// pod or a Redis the capture does not know yet from one it sees
		// no traffic of.
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heatsink_node_agent_capture_scope_pods", Help: "Pods of the node without a sidecar whose traffic the capture counts."},
			func() float64 { return float64(c.Stats().Pods) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heatsink_node_agent_capture_scope_endpoints", Help: "Redis endpoints (address and port) the capture's filter passes."},
			func() float64 { return float64(c.Stats().Endpoints) }),
	} {
		if err := reg.Register(m); err != nil {
			return err
		}
	}
	return nil
}
