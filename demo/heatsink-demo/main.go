// Command heatsink-demo runs the whole of heatsink on this machine (a real
// kube-apiserver and etcd, a 3-master Redis Cluster, the manager, node agents
// and sidecars) and shows a hot key detected and relieved. It is a separate
// binary so that the demo and its harnesses never reach the shipped image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/heatsink-dev/heatsink/demo"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "heatsink-demo: %v\n", err)
		os.Exit(1)
	}
}

// run runs everything on this machine and shows a hot key detected and
// relieved (see package demo). Ctrl-C stops it early; either way every
// process it started is stopped before it returns.
func run(args []string) error {
	cfg := demo.Default()
	fs := flag.NewFlagSet("heatsink-demo", flag.ContinueOnError)
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long traffic runs")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the key choice and the Zipf traffic")
	fs.IntVar(&cfg.BackgroundRate, "background-rate", cfg.BackgroundRate, "Zipf background traffic, ops/s (80% GET, 20% SET)")
	fs.IntVar(&cfg.ViralReadRate, "read-rate", cfg.ViralReadRate, "GETs/s of the viral read key")
	fs.DurationVar(&cfg.ViralReadAt, "read-at", cfg.ViralReadAt, "when the viral read key's spike starts")
	fs.IntVar(&cfg.ViralWriteRate, "write-rate", cfg.ViralWriteRate, "INCRs/s of the viral counter")
	fs.DurationVar(&cfg.ViralWriteAt, "write-at", cfg.ViralWriteAt, "when the viral counter's spike starts")
	fs.IntVar(&cfg.EventRate, "event-rate", cfg.EventRate, "GETs/s of the scheduled event's keys while it runs")
	fs.DurationVar(&cfg.EventStart, "event-at", cfg.EventStart, "when the scheduled event starts")
	fs.DurationVar(&cfg.EventLead, "event-lead", cfg.EventLead, "how long before the event its keys are prepared")
	fs.Int64Var(&cfg.ReadsPerSecond, "reads-threshold", cfg.ReadsPerSecond, "policy: reads/s over which a key is read-hot")
	fs.Int64Var(&cfg.WritesPerSecond, "writes-threshold", cfg.WritesPerSecond, "policy: writes/s over which a key is write-hot")
	auto := fs.Bool("auto", false, "policy: type no rate (thresholds.auto): thresholds from each master's learned capacity")
	keyShare := fs.Int("key-share", 25, "with -auto: thresholds.auto.keySharePercent")
	target := fs.Int("target-utilization", 70, "with -auto: thresholds.auto.targetUtilizationPercent")
	shardCPU := fs.String("shard-cpu", "", "hold every Redis node to this much CPU with a cgroup, as a pod's limits.cpu (e.g. 100m; root): a small shard; with -auto the policy's thresholds.auto.shardCPU says so")
	calm := fs.Bool("calm", false, fmt.Sprintf("only the Zipf background, over %d keys: no viral key, no event; the summary counts what was mitigated (none should be)", demo.CalmKeys))
	replicaReads := fs.Bool("replica-reads", false, fmt.Sprintf("3 masters with %d replicas each, the background and the viral read key only, local cache off and replica reads on: the summary gives the key's shard's GETs per node before and after", demo.ReplicasPerMaster))
	fs.DurationVar(&cfg.Epoch, "epoch", cfg.Epoch, "policy: split epoch (at least 1s)")
	fs.StringVar(&cfg.OutDir, "out", "demo-out", "directory for the PNG chart and the components' log")
	plain := fs.Bool("plain", false, "print one line per second instead of redrawing the screen")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *shardCPU != "" {
		q, err := resource.ParseQuantity(*shardCPU)
		if err != nil {
			return fmt.Errorf("-shard-cpu: %w", err)
		}
		cfg.ShardCPU = q.AsApproximateFloat64()
	}
	if *calm {
		cfg.SetCalm()
	}
	if *replicaReads {
		cfg.SetReplicaReads()
	}
	if *auto {
		cfg.Auto = demo.DefaultAuto()
		cfg.Auto.KeySharePercent, cfg.Auto.TargetUtilizationPercent = int32(*keyShare), int32(*target)
	}
	cfg.Out = os.Stdout
	cfg.Live = !*plain && term.IsTerminal(int(os.Stdout.Fd()))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := demo.Run(ctx, cfg)
	if errors.Is(err, context.Canceled) {
		fmt.Println("\nheatsink demo: interrupted; everything it started is stopped")
		return nil
	}
	if err != nil {
		return err
	}
	if len(res.Unavailable) > 0 {
		return fmt.Errorf("ran without: %v", res.Unavailable)
	}
	return nil
}
