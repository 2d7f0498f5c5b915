package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/heatsink-dev/heatsink/detector"
	"github.com/heatsink-dev/heatsink/detector/wire"
)

// runDetector runs one node's detector (the DaemonSet's container).
func runDetector(args []string) error {
	fs := flag.NewFlagSet("detector", flag.ContinueOnError)
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "the node this detector serves (default $NODE_NAME, from the downward API)")
	listen := fs.String("listen", fmt.Sprintf(":%d", wire.DefaultPort), "UDP address sidecars send their batches to")
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	memory := fs.Int("memory-per-policy", 64<<10, "sketch memory budget per policy, in bytes")
	fraction := fs.Float64("candidate-fraction", 0.1, "share of a policy threshold a key must reach on this node to be reported")
	opts := zap.Options{}
	opts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodeName == "" {
		return errors.New("--node-name or $NODE_NAME is required")
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	ctx := ctrl.SetupSignalHandler()
	d, err := detector.New(detector.Options{
		Config:            ctrl.GetConfigOrDie(),
		NodeName:          *nodeName,
		ListenAddr:        *listen,
		MemoryPerPolicy:   *memory,
		CandidateFraction: *fraction,
		Registerer:        ctrlmetrics.Registry,
		MetricsAddr:       *metricsAddr,
		ProbeAddr:         *probeAddr,
	})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}
