package clients

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// The policy every run's sidecar serves, and its thresholds: low, so that
// the workload's nHot reads and nIncr increments (within the 10 s window)
// are above them.
const (
	policyID       = "ns/p"
	readThreshold  = 5 // per second: nHot reads in 10 s are 10/s
	writeThreshold = 2 // per second: nIncr increments in 10 s are 5/s
)

// fleet is the manager's fleet server (the hub, real) and one real node
// agent connected to it, to which the sidecar of the pod 127.0.0.1 reports
// and from which it streams its routing table. What the manager's
// reconciler would decide from the hub's view (which keys to split) the
// test decides, and publishes through the hub as the reconciler does.
type fleet struct {
	hub *hub.Hub
	tap *tap
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	hubDone := make(chan struct{})
	go func() { _ = h.Start(ctx); close(hubDone) }()
	addr, err := h.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := &v1alpha1.HotKeyPolicySpec{}
	v1alpha1.SetDefaults(spec)
	spec.Thresholds.ReadsPerSecond, spec.Thresholds.WritesPerSecond = readThreshold, writeThreshold
	h.SetPolicy(policyID, hub.ParamsFromSpec(spec))
	h.UpsertPod("ns/app-0", "node-a", agentlink.Pod{IP: "127.0.0.1", Policy: policyID})
	d, err := nodeagent.New(nodeagent.Options{NodeName: "node-a", ListenAddr: "127.0.0.1:0", Manager: addr, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan struct{})
	go func() { _ = d.Run(ctx); close(agentDone) }()
	t.Cleanup(func() { cancel(); <-agentDone; <-hubDone })
	eventually.True(t, 20*time.Second, "the node agent connects to the manager", func() bool { return d.Stats().Connected })
	return &fleet{hub: h, tap: startTap(t, d.Addr().String(), d.RoutingAddr().String())}
}

// publish pushes a routing table through the hub, as the manager's
// reconciler does once it has decided; split is the counter to split in 4
// shards from epoch 0 ("" for none).
func (f *fleet) publish(version int64, split string) {
	entries, keys := "", []string(nil)
	if split != "" {
		entries = fmt.Sprintf(`{"key":%q,"source":"detected","split":{"generations":[{"fromEpoch":0,"shards":4}]}}`, split)
		keys = []string{split}
	}
	f.hub.SetRouting(policyID, version, []byte(fmt.Sprintf(`{"schemaVersion":1,"policy":%q,"version":%d,"epochMillis":60000,"entries":[%s]}`,
		policyID, version, entries)), keys)
}

// detected waits until the manager's view of the policy, built from the
// node agent's summaries of the sidecar's counts, has key at or above
// its threshold: reads, or writes if write. It returns the rate seen.
func (f *fleet) detected(t *testing.T, key string, write bool) float64 {
	t.Helper()
	var rate float64
	err := eventually.Poll(context.Background(), 20*time.Second, func() error {
		snap, _ := f.hub.Snapshot(policyID)
		e, ok := snap.Estimates[key]
		if !ok {
			return fmt.Errorf("the manager's view does not list %s", key)
		}
		threshold := float64(readThreshold)
		rate = e.Upper.Reads
		if write {
			rate, threshold = e.Upper.Writes, writeThreshold
		}
		if rate < threshold {
			return fmt.Errorf("%s at %.1f/s in the manager's view, under its threshold %v/s", key, rate, threshold)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no detection: %v", err)
	}
	return rate
}

// tap stands between the sidecar and its node agent, on one port for UDP
// and TCP as the agent is: it records the per-key counts of every batch
// the sidecar sends (as the agent decodes them) and passes the batch on
// from 127.0.0.1, the pod's address; TCP (the routing stream) it relays
// untouched. The exact counts say whether each command of the client went
// through the sidecar, which the agent's sketch (rates) cannot.
type tap struct {
	addr string
	*reports
}

func startTap(t *testing.T, agentUDP, agentTCP string) *tap {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	for i := 0; ; i++ { // a free TCP port whose UDP twin is free too
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if pc, err = net.ListenPacket("udp", ln.Addr().String()); err == nil {
			break
		}
		ln.Close()
		if i == 20 {
			t.Fatalf("no port free for both TCP and UDP: %v", err)
		}
	}
	out, err := net.Dial("udp", agentUDP)
	if err != nil {
		t.Fatal(err)
	}
	r := &reports{keys: map[string][2]uint64{}}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		var dec sidecarlink.Decoder
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = out.Write(buf[:n])
			r.record(&dec, buf[:n])
		}
	}()
	var conns sync.WaitGroup
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				relay(c, agentTCP)
			}()
		}
	}()
	t.Cleanup(func() { pc.Close(); ln.Close(); out.Close(); wg.Wait(); conns.Wait() })
	return &tap{addr: ln.Addr().String(), reports: r}
}

// relay copies c to and from a new connection to addr until either ends.
func relay(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}
