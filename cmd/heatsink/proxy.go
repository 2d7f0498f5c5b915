package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/heatsink-dev/heatsink/proxy/sidecar"
)

// runProxy runs the sidecar. Every flag defaults to its HEATSINK_*
// environment variable, which the injector sets on the container.
func runProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	env := func(k, def string) string {
		if v, ok := os.LookupEnv(k); ok {
			return v
		}
		return def
	}
	envBool, _ := strconv.ParseBool(env("HEATSINK_CLUSTER", "false"))
	var c sidecar.Config
	fs.StringVar(&c.Listen, "listen", env("HEATSINK_LISTEN", "127.0.0.1:6380"), "address the application connects to (HEATSINK_LISTEN)")
	upstream := fs.String("upstream", env("HEATSINK_UPSTREAM", ""), "comma-separated Redis host:port (cluster: seeds) (HEATSINK_UPSTREAM)")
	fs.BoolVar(&c.Cluster, "cluster", envBool, "upstream is a Redis Cluster (HEATSINK_CLUSTER)")
	fs.StringVar(&c.Policy, "policy", env("HEATSINK_POLICY", ""), "HotKeyPolicy name whose routing table to follow (HEATSINK_POLICY)")
	fs.StringVar(&c.Namespace, "namespace", env("HEATSINK_NAMESPACE", ""), "namespace of the policy (HEATSINK_NAMESPACE)")
	fs.StringVar(&c.RoutingFile, "routing-file", env("HEATSINK_ROUTING_FILE", "/etc/heatsink/routing/routing.json"), "mounted routing table, the fallback when the API server is away (HEATSINK_ROUTING_FILE)")
	fs.StringVar(&c.Detector, "detector", env("HEATSINK_DETECTOR", ""), "host:port of the node's detector; empty disables reports (HEATSINK_DETECTOR)")
	fs.StringVar(&c.Username, "redis-username", env("HEATSINK_REDIS_USERNAME", ""), "upstream ACL user (HEATSINK_REDIS_USERNAME)")
	fs.StringVar(&c.Password, "redis-password", env("HEATSINK_REDIS_PASSWORD", ""), "upstream password (HEATSINK_REDIS_PASSWORD)")
	fs.StringVar(&c.HTTPAddress, "http-address", env("HEATSINK_HTTP_ADDRESS", ":9091"), "address of /metrics, /healthz, /readyz (HEATSINK_HTTP_ADDRESS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, a := range strings.Split(*upstream, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Upstreams = append(c.Upstreams, a)
		}
	}
	c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return sidecar.Run(ctx, c)
}
