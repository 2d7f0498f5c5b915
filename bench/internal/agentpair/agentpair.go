// Package agentpair starts what the reaction benchmarks time (the
// manager's real hub with one policy and a real node agent connected to
// it, on 127.0.0.1, with real clocks), paces their traffic and prints
// their times.
package agentpair

import (
	"context"
	"fmt"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/nodeagent"
)

// Node is the agent's node name; SidecarPod the pod, at 127.0.0.1 (where a
// sidecar's wire client sends from), that the hub lists with the policy's
// sidecar on that node.
const (
	Node       = "node-bench"
	SidecarPod = "bench/app-0"
	token      = "bench-token"
)

// Start runs, until ctx ends, a hub with policy (the defaults, then edit
// if not nil) and a node agent with opts (its node, addresses and token
// set here), and returns once the agent is connected and follows the
// policy.
func Start(ctx context.Context, policy string, edit func(*v1alpha1.HotKeyPolicySpec), opts nodeagent.Options) (*hub.Hub, *nodeagent.Agent, error) {
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: token, WarmUp: -1})
	if err != nil {
		return nil, nil, err
	}
	go func() { _ = h.Start(ctx) }()
	addr, err := h.Addr(ctx)
	if err != nil {
		return nil, nil, err
	}
	spec := &v1alpha1.HotKeyPolicySpec{}
	v1alpha1.SetDefaults(spec)
	if edit != nil {
		edit(spec)
	}
	h.SetPolicy(policy, hub.ParamsFromSpec(spec))
	h.UpsertPod(SidecarPod, Node, agentlink.Pod{IP: "127.0.0.1", Policy: policy})
	opts.NodeName, opts.ListenAddr, opts.Manager, opts.Token = Node, "127.0.0.1:0", addr, token
	d, err := nodeagent.New(opts)
	if err != nil {
		return nil, nil, err
	}
	go func() { _ = d.Run(ctx) }()
	for !d.Stats().Connected || !d.Tracks(policy) {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		time.Sleep(10 * time.Millisecond) // polling until the agent follows the hub
	}
	return h, d, nil
}

// Ms prints a duration in whole milliseconds, "—" for none.
func Ms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// Pace calls f about every 10 ms with the number of operations owed since
// the start at rate per second: the offered rate holds even when the
// sender is descheduled on a loaded machine.
func Pace(ctx context.Context, rate float64, f func(n int)) {
	start := time.Now()
	sent := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if owed := int(time.Since(start).Seconds() * rate); owed > sent {
			f(owed - sent)
			sent = owed
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
