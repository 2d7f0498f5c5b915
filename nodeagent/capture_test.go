package nodeagent

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
)

const capturePassword = "s3cret-Passw0rd-never-kept"

// TestManagerListsPodsWithoutSidecar: the hub lists a pod without the
// sidecar to its node's agent for every policy of the pod's namespace,
// marked uninjected, so the agent's capture may count it and its batches
// are still refused; a policy added later lists it, a removed one unlists
// it, and a pod of a namespace without a policy is not listed.
func TestManagerListsPodsWithoutSidecar(t *testing.T) {
	h := start(t)
	uninjected := func() map[string]string {
		out := map[string]string{}
		for a, ns := range h.d.sources.uninjectedPods() {
			out[a.String()] = ns
		}
		return out
	}
	h.hub.UpsertUninjectedPod("shop/plain-0", node, "10.9.0.1")
	h.hub.UpsertUninjectedPod("other/plain-0", node, "10.9.0.2")
	eventually.True(t, 20*time.Second, "shop/plain-0 listed", func() bool {
		u := uninjected()
		return len(u) == 1 && u["10.9.0.1"] == "shop"
	})
	if v := h.d.sources.entitled(netip.MustParseAddr("10.9.0.1"), policy); v == verdictOK {
		t.Error("a pod without the sidecar may send counts")
	}
	// A policy in the other namespace: its pod is listed from then on.
	spec := &v1alpha1.HotKeyPolicySpec{}
	v1alpha1.SetDefaults(spec)
	h.hub.SetPolicy("other/p", hub.ParamsFromSpec(spec))
	eventually.True(t, 20*time.Second, "other/plain-0 listed once other/p exists", func() bool {
		return uninjected()["10.9.0.2"] == "other"
	})
	h.hub.RemovePolicy("other/p")
	eventually.True(t, 20*time.Second, "other/plain-0 unlisted with its policy", func() bool {
		_, ok := uninjected()["10.9.0.2"]
		return !ok
	})
	h.hub.DeleteUninjectedPod("shop/plain-0")
	eventually.True(t, 20*time.Second, "shop/plain-0 unlisted once deleted", func() bool { return len(uninjected()) == 0 })
}

// TestCaptureCountsPodsWithoutSidecar: a real node agent and hub, a real
// redis-server in one network namespace, real clients with no sidecar in
// another, and the agent's capture on every interface of the "node" (the
// observer namespace that routes between them). The captured commands are
// counted for the pod that sent them, exactly, reads and writes apart; a
// pod with the sidecar and a pod of another namespace are not counted; a
// stream with bytes the parser cannot read resynchronises; the password
// never reaches the agent's counts.
func TestCaptureCountsPodsWithoutSidecar(t *testing.T) {
	n := netns.ForTest(t, "redis-server")
	netns.Redis(t, n.Server, netns.ServerIP, 6379, "--requirepass", capturePassword)
	redisAddr := netns.ServerIP + ":6379"

	var c *capture.Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = capture.Open(capture.Config{}) // every interface of the node
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const threshold = 1000
	var params hub.Params
	h := startOpts(t, func(spec *v1alpha1.HotKeyPolicySpec) {
		defer func() { params = hub.ParamsFromSpec(spec) }()
		spec.Target.Addresses = []string{redisAddr}
		spec.Thresholds.ReadsPerSecond, spec.Thresholds.WritesPerSecond = threshold, threshold
	}, func(o *Options) { o.Capture = c })
	// The manager names the node's pods: one without the sidecar (counted
	// by the capture), one with it (its sidecar counts it), one without
	// the sidecar in another namespace (not entitled to this policy, and
	// not listed: that namespace has no policy).
	h.hub.UpsertUninjectedPod("shop/plain-0", node, netns.ClientIP)
	h.hub.UpsertPod("shop/injected-0", node, agentlink.Pod{IP: netns.ClientIP2, Policy: policy})
	h.hub.UpsertUninjectedPod("other/plain-0", node, netns.ClientIP3)
	eventually.True(t, 20*time.Second, "the capture's scope names the endpoint and the pod without a sidecar", func() bool {
		s := c.Stats()
		return s.Targets == 1 && s.Endpoints == 1 && s.Pods == 1
	})

	client := func(from string) *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: redisAddr, Password: capturePassword,
			Dialer: netns.Dialer(n.Client, from), PoolSize: 4})
		t.Cleanup(func() { r.Close() })
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plain := client(netns.ClientIP)
	// 1.5 × the threshold in one tick of the agent's (fake) clock: 150
	// reads and 150 writes of product:hot in 100 ms.
	const hot = threshold * 15 / 100
	for i := range hot {
		if err := plain.Get(ctx, "product:hot").Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if err := plain.Set(ctx, "product:hot", fmt.Sprint(i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A pipeline: 100 commands in one write.
	pipe := plain.Pipeline()
	for range 100 {
		pipe.Get(ctx, "product:piped")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	// A value holding what looks like a command: not a command.
	if err := plain.Set(ctx, "product:v", "*2\r\n$3\r\nGET\r\n$12\r\nproduct:fake\r\n", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The other pods' traffic.
	for _, from := range []string{netns.ClientIP2, netns.ClientIP3} {
		r := client(from)
		for range 200 {
			if err := r.Get(ctx, "product:elsewhere").Err(); err != nil && err != redis.Nil {
				t.Fatal(err)
			}
		}
	}
	// A connection whose first bytes the parser cannot read (inline
	// commands, as a terminal sends them: AUTH with the password, PING),
	// then ordinary commands: counted once the parser resynchronises.
	raw, err := netns.Dialer(n.Client, netns.ClientIP)(ctx, "tcp", redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var req strings.Builder
	req.WriteString("AUTH " + capturePassword + "\r\nPING\r\n")
	for range 10 {
		req.WriteString("*2\r\n$3\r\nGET\r\n$13\r\nproduct:after\r\n")
	}
	if _, err := raw.Write([]byte(req.String())); err != nil {
		t.Fatal(err)
	}
	replies := bufio.NewReader(raw)
	for i := range 12 {
		_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := replies.ReadString('\n')
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if i == 0 && line != "+OK\r\n" {
			t.Fatalf("AUTH answered %q", line)
		}
	}

	wantReads, wantWrites := uint64(hot+100+10), uint64(hot+1)
	p := h.d.policies[policy]
	totals := func() (r, w uint64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.reads, p.writes
	}
	eventually.True(t, 20*time.Second, "every captured command counted", func() bool {
		r, w := totals()
		return r >= wantReads && w >= wantWrites
	})
	// Two flushes later, nothing more than was sent.
	flushes := c.Stats().Flushes
	eventually.True(t, 20*time.Second, "two more flushes", func() bool { return c.Stats().Flushes >= flushes+2 })
	if r, w := totals(); r != wantReads || w != wantWrites {
		t.Errorf("counted %d reads and %d writes, sent %d and %d by the pod without a sidecar", r, w, wantReads, wantWrites)
	}
	t.Logf("capture: %+v", c.Stats())
	if s := c.Stats(); s.Resyncs == 0 {
		t.Errorf("no resynchronisation counted after the inline commands: %+v", s)
	}

	// The hub sees the hot key over both thresholds once the agent reports.
	h.step()
	eventually.True(t, 20*time.Second, "product:hot over its read and write thresholds at the manager", func() bool {
		snap, _ := h.hub.Snapshot(policy)
		o := snap.Keys["product:hot"]
		return o.ReadsPerSecond >= threshold && o.WritesPerSecond >= threshold
	})
	snap, _ := h.hub.Snapshot(policy)
	for k, o := range snap.Keys {
		t.Logf("at the manager: %s reads/s %d writes/s %d", k, o.ReadsPerSecond, o.WritesPerSecond)
		if strings.Contains(k, capturePassword) || k == "product:fake" || k == "product:elsewhere" {
			t.Errorf("key %q reached the manager", k)
		}
	}

	// A cluster slot map in the manager's directive reaches the capture:
	// with every slot on another master (a node that is not this server),
	// commands to this server are not counted (redirects, to the map);
	// with every slot on this server and two replicas, they are again.
	// (Each map has its own number of endpoints: the test knows when the
	// agent applied it.)
	other := netns.ServerIP + ":6390"
	for _, c0 := range []struct {
		slots     []agentlink.SlotRange
		endpoints int
		counted   bool
	}{
		{[]agentlink.SlotRange{{Start: 0, End: 16383, Nodes: []string{other}}}, 2, false},
		{[]agentlink.SlotRange{{Start: 0, End: 16383, Nodes: []string{redisAddr, other, netns.ServerIP + ":6391"}}}, 3, true},
	} {
		ps := params
		ps.Slots = c0.slots
		h.hub.SetPolicy(policy, ps)
		eventually.True(t, 20*time.Second, "the slot map's nodes in the capture's scope", func() bool { return c.Stats().Endpoints == c0.endpoints })
		f := c.Stats().Flushes
		eventually.True(t, 20*time.Second, "two more flushes", func() bool { return c.Stats().Flushes >= f+2 })
		r0, _ := totals()
		ns0 := c.Stats().NotServed
		for range 10 {
			if err := plain.Get(ctx, "product:slots").Err(); err != nil && err != redis.Nil {
				t.Fatal(err)
			}
		}
		want, wantNS := r0, ns0+10
		if c0.counted {
			want, wantNS = r0+10, ns0
		}
		eventually.True(t, 20*time.Second, "the reads counted, or not served, by the map", func() bool {
			r, _ := totals()
			return r == want && c.Stats().NotServed == wantNS
		})
	}
}
