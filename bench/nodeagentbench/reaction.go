package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/bench/internal/agentpair"
	"github.com/heatsink-dev/heatsink/dataplane/counts"
	"github.com/heatsink-dev/heatsink/nodeagent"
)

// reactionTest measures, with real clocks, a real node agent, the
// manager's real hub and a sidecar's wire client, how long a key that
// turns from cold to 6000 reads/s (over the default 5000) takes to appear in
// the manager's view of the fleet, and to appear there over its threshold.
// Default settings: window 10s, report interval 1s, client flush 100ms.
// (The whole path to the sidecars, with the API server, is the fleet
// simulator's: hack/bench.d/50-fleet.sh.)
func reactionTest(ctx context.Context, trials int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const policy = "bench/checkout"
	h, d, err := agentpair.Start(ctx, policy, nil, nodeagent.Options{})
	if err != nil {
		return err
	}
	c, err := counts.NewClient(d.Addr().String(), counts.ClientOptions{})
	if err != nil {
		return err
	}
	defer c.Close()

	// Background traffic: 200 warm keys at 20 reads/s each.
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	go agentpair.Pace(bg, 20, func(k int) {
		n := uint32(k)
		for i := range 200 {
			c.Observe(policy, fmt.Sprintf("product:warm-%d", i), n, 0, 100*n)
		}
	})

	var appear, over []time.Duration
	fmt.Println("### Reaction: cold key to the manager's view, real clock, node agent and hub")
	fmt.Println()
	fmt.Println("A key goes from cold to 6000 reads/s (default threshold 5000, window 10s, report interval 1s, sidecar flush 100ms).")
	fmt.Println()
	fmt.Println("| trial | in the manager's view | in the view over threshold |")
	fmt.Println("|---:|---:|---:|")
	for i := range trials {
		key := fmt.Sprintf("product:hot-%d", i)
		hot, stopHot := context.WithCancel(ctx)
		start := time.Now()
		go agentpair.Pace(hot, 6000, func(k int) { c.Observe(policy, key, uint32(k), 0, 512*uint32(k)) })
		var tIn, tOver time.Duration
		for tOver == 0 && time.Since(start) < 10*time.Second {
			snap, _ := h.Snapshot(policy)
			if est, ok := snap.Keys[key]; ok {
				if tIn == 0 {
					tIn = time.Since(start)
				}
				if est.ReadsPerSecond >= v1alpha1.FallbackReadsPerSecond {
					tOver = time.Since(start)
				}
			}
			time.Sleep(5 * time.Millisecond) // polling the hub
		}
		stopHot()
		if tOver == 0 {
			fmt.Printf("| %d | %s | not within 10s |\n", i+1, agentpair.Ms(tIn))
			continue
		}
		appear, over = append(appear, tIn), append(over, tOver)
		fmt.Printf("| %d | %s | %s |\n", i+1, agentpair.Ms(tIn), agentpair.Ms(tOver))
		time.Sleep(500 * time.Millisecond) // let the next trial start mid-interval
	}
	if len(over) > 0 {
		slices.Sort(appear)
		slices.Sort(over)
		fmt.Printf("| median | %s | %s |\n", agentpair.Ms(appear[len(appear)/2]), agentpair.Ms(over[len(over)/2]))
		fmt.Printf("| worst | %s | %s |\n", agentpair.Ms(appear[len(appear)-1]), agentpair.Ms(over[len(over)-1]))
	}
	fmt.Println()
	return nil
}
