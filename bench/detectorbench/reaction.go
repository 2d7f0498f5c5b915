package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector"
	"github.com/heatsink-dev/heatsink/detector/report"
	"github.com/heatsink-dev/heatsink/detector/wire"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
)

// reactionTest measures, with real clocks, a real API server, a real
// detector and a sidecar's wire client, how long a key that turns from cold
// to 6000 reads/s (over the default 5000) takes to appear in the node's
// report, and to appear there over its threshold. Default settings: window
// 10s, report interval 1s, client flush 100ms.
func reactionTest(ctx context.Context, trials int) error {
	logf("detectorbench: reaction: starting a control plane")
	ctrl.SetLogger(logr.Discard())
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return err
	}
	defer cp.Stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const ns, node = "bench", "node-bench"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	pol := &v1alpha1.HotKeyPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "checkout"},
		Spec:       v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{Addresses: []string{"redis:6379"}}},
	}
	v1alpha1.SetDefaults(&pol.Spec)
	if err := cp.Client.Create(ctx, pol); err != nil {
		return err
	}
	d, err := detector.New(detector.Options{Config: cp.Config, NodeName: node, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	go func() { _ = d.Run(ctx) }()
	for !d.Tracks(ns + "/checkout") {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(10 * time.Millisecond) // polling until the policy is known
	}
	c, err := wire.NewClient(d.Addr().String(), wire.ClientOptions{})
	if err != nil {
		return err
	}
	defer c.Close()

	// Background traffic: 200 warm keys at 20 reads/s each.
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	go paceRate(bg, 20, func(n uint32) {
		for i := range 200 {
			c.Observe(ns+"/checkout", fmt.Sprintf("product:warm-%d", i), n, 0, 100*n)
		}
	})

	var appear, over []time.Duration
	fmt.Println("### Reaction: cold key to report, real clock and API server")
	fmt.Println()
	fmt.Println("A key goes from cold to 6000 reads/s (default threshold 5000, window 10s, report interval 1s, sidecar flush 100ms).")
	fmt.Println()
	fmt.Println("| trial | in the report | in the report over threshold |")
	fmt.Println("|---:|---:|---:|")
	for i := range trials {
		key := fmt.Sprintf("product:hot-%d", i)
		hot, stopHot := context.WithCancel(ctx)
		start := time.Now()
		go paceRate(hot, 6000, func(n uint32) { c.Observe(ns+"/checkout", key, n, 0, 512*n) })
		var tIn, tOver time.Duration
		for tOver == 0 && time.Since(start) < 10*time.Second {
			var r v1alpha1.HotKeyReport
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: report.Name("checkout", node)}, &r)
			if err != nil && !apierrors.IsNotFound(err) {
				stopHot()
				return err
			}
			for _, cand := range r.Spec.Candidates {
				if cand.Key != key {
					continue
				}
				if tIn == 0 {
					tIn = time.Since(start)
				}
				if cand.ReadsPerSecond >= v1alpha1.DefaultReadsPerSecond {
					tOver = time.Since(start)
				}
			}
			time.Sleep(5 * time.Millisecond) // polling the API server
		}
		stopHot()
		if tOver == 0 {
			fmt.Printf("| %d | %s | not within 10s |\n", i+1, ms(tIn))
			continue
		}
		appear, over = append(appear, tIn), append(over, tOver)
		fmt.Printf("| %d | %s | %s |\n", i+1, ms(tIn), ms(tOver))
		time.Sleep(500 * time.Millisecond) // let the next trial start mid-interval
	}
	if len(over) > 0 {
		slices.Sort(appear)
		slices.Sort(over)
		fmt.Printf("| median | %s | %s |\n", ms(appear[len(appear)/2]), ms(over[len(over)/2]))
		fmt.Printf("| worst | %s | %s |\n", ms(appear[len(appear)-1]), ms(over[len(over)-1]))
	}
	fmt.Println()
	return nil
}

func ms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// paceRate calls f about every 10ms with the number of operations owed
// since the start at rate per second, so that the offered rate holds even
// when the sender is descheduled on a loaded machine (a ticker drops ticks).
func paceRate(ctx context.Context, rate float64, f func(n uint32)) {
	start := time.Now()
	var sent uint64
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		owed := uint64(time.Since(start).Seconds() * rate)
		if owed > sent {
			f(uint32(owed - sent))
			sent = owed
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
