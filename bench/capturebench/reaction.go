package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/bench/internal/agentpair"
	"github.com/heatsink-dev/heatsink/dataplane/counts"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/nodeagent"
)

// hotConns is how many connections the captured hot key's reads are
// spread over (a small pool, as one pod's client library keeps).
const hotConns = 4

// reaction measures, with real clocks, a real node agent (its capture on
// the observer namespace), the manager's real hub and real redis-server,
// how long a key that goes from cold to 1.5 × its read threshold takes to
// reach the manager's view over the threshold: sent by a pod without the
// sidecar (captured), and, started at the same instant, by a sidecar (its
// wire client), so both paths are timed side by side in the same intervals.
func reaction(n *netns.Net, server netip.AddrPort, trials int, sample uint32) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const policy = "bench/p"
	threshold := float64(v1alpha1.FallbackReadsPerSecond)
	c, err := openCapture(n, sample, 0)
	if err != nil {
		return err
	}
	h, d, err := agentpair.Start(ctx, policy, func(spec *v1alpha1.HotKeyPolicySpec) {
		spec.Target.Addresses = []string{server.String()}
	}, nodeagent.Options{Capture: c})
	if err != nil {
		return err
	}
	h.UpsertUninjectedPod("bench/plain-0", agentpair.Node, netns.ClientIP)
	for t0, s := time.Now(), c.Stats(); s.Targets != 1 || s.Pods != 1; s = c.Stats() {
		if time.Since(t0) > 20*time.Second {
			return fmt.Errorf("the capture's scope is not the policy's: %+v", s)
		}
		time.Sleep(10 * time.Millisecond) // polling until the agent's capture follows the hub
	}
	side, err := counts.NewClient(d.Addr().String(), counts.ClientOptions{})
	if err != nil {
		return err
	}
	defer side.Close()

	dial := func() (net.Conn, error) {
		return netns.Dialer(n.Client, netns.ClientIP)(ctx, "tcp", server.String())
	}
	// Background traffic, captured: 200 warm keys at 20 reads/s each.
	bgConn, err := dial()
	if err != nil {
		return err
	}
	defer bgConn.Close()
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	warm := func(i int) string { return fmt.Sprintf("product:warm-%d", i%200) }
	go func() { _ = sendPaced(bg, bgConn, 4000, warm) }()

	fmt.Printf("#### Reaction: a key from cold to 1.5 × its threshold, captured and through a sidecar\n\n")
	fmt.Printf("Real node agent (capture on the observer namespace, sampling 1 in %d), hub and redis-server. Each trial starts, at the same instant, %.0f reads/s (1.5 × the default threshold of %.0f; window 10 s, report interval 1 s) of one key sent by a pod without the sidecar over %d connections opened for the trial (captured) and of another key through a sidecar's wire client (flush 100 ms), with 4,000 reads/s of 200 warm keys captured throughout. Times from the start to the key in the manager's view, and to the key there at or over its threshold.\n\n",
		max(sample, 1), 1.5*threshold, threshold, hotConns)
	fmt.Println("| trial | captured: in view | captured: over threshold | sidecar: in view | sidecar: over threshold |")
	fmt.Println("|---:|---:|---:|---:|---:|")
	var capOver, sideOver []time.Duration
	for i := range trials {
		capKey, sideKey := fmt.Sprintf("product:captured-%d", i), fmt.Sprintf("product:sidecar-%d", i)
		// New connections each trial: with sampling, each trial draws
		// which of them are captured.
		var conns []net.Conn
		for range hotConns {
			conn, err := dial()
			if err != nil {
				return err
			}
			conns = append(conns, conn)
		}
		hot, stopHot := context.WithCancel(ctx)
		var wg sync.WaitGroup
		start := time.Now()
		for _, conn := range conns {
			wg.Go(func() { _ = sendPaced(hot, conn, 1.5*threshold/hotConns, func(int) string { return capKey }) })
		}
		wg.Go(func() {
			agentpair.Pace(hot, 1.5*threshold, func(k int) {
				side.Observe(policy, sideKey, uint32(k), 0, 0)
			})
		})
		var t [4]time.Duration // captured in, over; sidecar in, over
		for (t[1] == 0 || t[3] == 0) && time.Since(start) < 10*time.Second {
			snap, _ := h.Snapshot(policy)
			for j, key := range []string{capKey, sideKey} {
				if est, ok := snap.Keys[key]; ok {
					if t[2*j] == 0 {
						t[2*j] = time.Since(start)
					}
					if t[2*j+1] == 0 && float64(est.ReadsPerSecond) >= threshold {
						t[2*j+1] = time.Since(start)
					}
				}
			}
			time.Sleep(5 * time.Millisecond) // polling the hub
		}
		stopHot()
		wg.Wait()
		for _, conn := range conns {
			conn.Close()
		}
		fmt.Printf("| %d | %s | %s | %s | %s |\n", i+1, agentpair.Ms(t[0]), agentpair.Ms(t[1]), agentpair.Ms(t[2]), agentpair.Ms(t[3]))
		if t[1] != 0 {
			capOver = append(capOver, t[1])
		}
		if t[3] != 0 {
			sideOver = append(sideOver, t[3])
		}
		time.Sleep(700 * time.Millisecond) // the next trial starts elsewhere in the report interval
	}
	fmt.Println()
	fmt.Printf("Over threshold within 10 s: captured %d of %d trials (%s), sidecar %d of %d (%s). Budget: one report interval (1 s, docs/node-agent.md \"The guarantee\").\n\n",
		len(capOver), trials, spread(capOver), len(sideOver), trials, spread(sideOver))
	return nil
}

func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	return fmt.Sprintf("median %s, worst %s", agentpair.Ms(ds[len(ds)/2]), agentpair.Ms(ds[len(ds)-1]))
}

// sendPaced sends GETs of key(i) on conn at rate per second (each tick's
// commands in one write, as a client's pipeline) and reads their replies
// (nil bulks: the keys hold nothing).
func sendPaced(ctx context.Context, conn net.Conn, rate float64, key func(i int) string) error {
	var err error
	i := 0
	reply := make([]byte, 0, 4096)
	agentpair.Pace(ctx, rate, func(k int) {
		if err != nil {
			return
		}
		var req []byte
		for range k {
			kk := key(i)
			i++
			req = fmt.Appendf(req, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(kk), kk)
		}
		if _, err = conn.Write(req); err != nil {
			return
		}
		reply = slices.Grow(reply[:0], 5*k)[:5*k] // "$-1\r\n" each
		_, err = io.ReadFull(conn, reply)
	})
	return err
}
