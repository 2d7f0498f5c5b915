package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
)

// runSidecar runs the sidecar. Every flag defaults to its HEATSINK_*
// environment variable, which the injector sets on the container.
func runSidecar(args []string) error {
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	env := func(k, def string) string {
		if v, ok := os.LookupEnv(k); ok {
			return v
		}
		return def
	}
	envBool := func(k string) bool {
		b, _ := strconv.ParseBool(env(k, "false"))
		return b
	}
	var envErr error
	envInt := func(k string, def int) int {
		v, ok := os.LookupEnv(k)
		if !ok || v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			envErr = fmt.Errorf("%s=%q: not an integer", k, v)
			return def
		}
		return n
	}
	var c sidecar.Config
	fs.StringVar(&c.Listen, "listen", env("HEATSINK_LISTEN", "127.0.0.1:6380"), "address the application connects to (HEATSINK_LISTEN)")
	upstream := fs.String("upstream", env("HEATSINK_UPSTREAM", ""), "comma-separated Redis host:port (cluster: seeds) (HEATSINK_UPSTREAM)")
	fs.BoolVar(&c.Cluster, "cluster", envBool("HEATSINK_CLUSTER"), "upstream is a Redis Cluster (HEATSINK_CLUSTER)")
	sentinels := fs.String("sentinel", env("HEATSINK_SENTINEL_ADDRESSES", ""), "comma-separated Redis Sentinel host:port, instead of --upstream: the master of --sentinel-master is found through them and followed across failovers (HEATSINK_SENTINEL_ADDRESSES)")
	fs.StringVar(&c.SentinelMaster, "sentinel-master", env("HEATSINK_SENTINEL_MASTER", ""), "name the Sentinels monitor the master under (HEATSINK_SENTINEL_MASTER)")
	fs.StringVar(&c.SentinelUsername, "sentinel-username", env("HEATSINK_SENTINEL_USERNAME", ""), "ACL user of the Sentinels (HEATSINK_SENTINEL_USERNAME)")
	// As for Redis' password: from the environment or a file only.
	c.SentinelPassword = os.Getenv("HEATSINK_SENTINEL_PASSWORD")
	fs.StringVar(&c.SentinelUsernameFile, "sentinel-username-file", env("HEATSINK_SENTINEL_USERNAME_FILE", ""), "file holding the Sentinels' ACL user, read at each new connection to a Sentinel (the injector mounts the Sentinel credentials Secret); replaces --sentinel-username (HEATSINK_SENTINEL_USERNAME_FILE)")
	fs.StringVar(&c.SentinelPasswordFile, "sentinel-password-file", env("HEATSINK_SENTINEL_PASSWORD_FILE", ""), "file holding the Sentinels' password (their requirepass or the ACL user's), read at each new connection to a Sentinel, so a rotated Secret needs no restart; replaces HEATSINK_SENTINEL_PASSWORD (HEATSINK_SENTINEL_PASSWORD_FILE)")
	fs.StringVar(&c.Policy, "policy", env("HEATSINK_POLICY", ""), "HotKeyPolicy name whose routing table to follow (HEATSINK_POLICY)")
	fs.StringVar(&c.Namespace, "namespace", env("HEATSINK_NAMESPACE", ""), "namespace of the policy (HEATSINK_NAMESPACE)")
	fs.StringVar(&c.RoutingFile, "routing-file", env("HEATSINK_ROUTING_FILE", "/etc/heatsink/routing/routing.json"), "mounted routing table, the fallback when the node agent is away; empty: none (HEATSINK_ROUTING_FILE)")
	fs.StringVar(&c.NodeAgent, "node-agent", env("HEATSINK_NODE_AGENT", ""), "host:port of the node agent: counts go to it over UDP, routing tables come from it over TCP; empty: no reports, routing from the file only (HEATSINK_NODE_AGENT)")
	fs.StringVar(&c.Username, "redis-username", env("HEATSINK_REDIS_USERNAME", ""), "upstream ACL user (HEATSINK_REDIS_USERNAME)")
	// The password comes from the environment or a file only: a flag would
	// show it in ps and in the pod's command line.
	c.Password = os.Getenv("HEATSINK_REDIS_PASSWORD")
	fs.StringVar(&c.UsernameFile, "redis-username-file", env("HEATSINK_REDIS_USERNAME_FILE", ""), "file holding the upstream ACL user, read at each new connection to Redis (the injector mounts the policy's credentials Secret); replaces --redis-username (HEATSINK_REDIS_USERNAME_FILE)")
	fs.StringVar(&c.PasswordFile, "redis-password-file", env("HEATSINK_REDIS_PASSWORD_FILE", ""), "file holding the upstream password, read at each new connection to Redis, so a rotated Secret needs no restart; replaces HEATSINK_REDIS_PASSWORD (HEATSINK_REDIS_PASSWORD_FILE)")
	useTLS := fs.Bool("tls", envBool("HEATSINK_TLS"), "connect to Redis over TLS (HEATSINK_TLS)")
	var tlsOpts proxy.TLSOptions
	fs.StringVar(&tlsOpts.CAFile, "tls-ca-file", env("HEATSINK_TLS_CA_FILE", ""), "PEM bundle of the CAs that sign Redis' certificate; empty uses the system roots (HEATSINK_TLS_CA_FILE)")
	fs.StringVar(&tlsOpts.ServerName, "tls-server-name", env("HEATSINK_TLS_SERVER_NAME", ""), "name to verify in Redis' certificate; empty uses each address's host (HEATSINK_TLS_SERVER_NAME)")
	fs.StringVar(&tlsOpts.CertFile, "tls-cert-file", env("HEATSINK_TLS_CERT_FILE", ""), "PEM client certificate presented to Redis (tls-auth-clients yes), re-read when it changes (HEATSINK_TLS_CERT_FILE)")
	fs.StringVar(&tlsOpts.KeyFile, "tls-key-file", env("HEATSINK_TLS_KEY_FILE", ""), "PEM key of --tls-cert-file (HEATSINK_TLS_KEY_FILE)")
	fs.BoolVar(&tlsOpts.InsecureSkipVerify, "tls-insecure-skip-verify", envBool("HEATSINK_TLS_INSECURE_SKIP_VERIFY"), "do not verify Redis' certificate (HEATSINK_TLS_INSECURE_SKIP_VERIFY)")
	c.Limits = proxy.DefaultClientLimits()
	fs.IntVar(&c.Limits.MaxBulk, "max-bulk", envInt("HEATSINK_MAX_BULK", c.Limits.MaxBulk), "largest bulk string accepted from a client, in bytes: Redis' proto-max-bulk-len; values over 1 MiB are streamed, not held (HEATSINK_MAX_BULK)")
	eventLoop := fs.Bool("event-loop", !envBool("HEATSINK_NO_EVENT_LOOP"), "serve stateless clients from one epoll event loop (Linux, plaintext or TLS upstream); false gives every client a goroutine (HEATSINK_NO_EVENT_LOOP=true)")
	fs.StringVar(&c.HTTPAddress, "http-address", env("HEATSINK_HTTP_ADDRESS", ":9091"), "address of /metrics, /healthz, /readyz, /startupz (HEATSINK_HTTP_ADDRESS)")
	replyTimeout := fs.String("reply-timeout", env("HEATSINK_REPLY_TIMEOUT", "0"), "if set (e.g. 30s), the longest the proxy waits for a Redis reply before answering an error; 0, the default, waits as long as Redis takes, like a direct connection (HEATSINK_REPLY_TIMEOUT)")
	startupWait := fs.String("startup-wait", env("HEATSINK_STARTUP_WAIT", sidecar.DefaultStartupWait.String()), "the longest the proxy holds its clients at start (they connect, their commands wait) until it has the routing table in force, from the node agent or the mounted file; past it, it serves without the table and says so (log, heatsink_proxy_serving_unmitigated, /startupz); 0 serves at once (HEATSINK_STARTUP_WAIT)")
	maxMemory := fs.String("max-memory", env("HEATSINK_MAX_MEMORY", ""), "the sidecar's memory ceiling (bytes or a quantity such as 192Mi); empty: 75% of the container's memory limit, or 192Mi (75% of the injected 256Mi) without one (HEATSINK_MAX_MEMORY)")
	if err := parseFlags(fs, args, "Runs the sidecar: a RESP proxy on 127.0.0.1 that forwards every command, counts key accesses for the node agent and applies the policy's routing table. Every flag defaults to its HEATSINK_* variable, which the injector sets."); err != nil {
		return err
	}
	if envErr != nil {
		return usageError{envErr}
	}
	var err error
	if c.ReplyTimeout, err = time.ParseDuration(*replyTimeout); err != nil || c.ReplyTimeout < 0 {
		return usageError{fmt.Errorf("--reply-timeout=%q: want a non-negative duration such as 30s or 0", *replyTimeout)}
	}
	if c.StartupWait, err = time.ParseDuration(*startupWait); err != nil || c.StartupWait < 0 {
		return usageError{fmt.Errorf("--startup-wait=%q: want a non-negative duration such as 10s, or 0", *startupWait)}
	}
	if c.StartupWait == 0 {
		c.StartupWait = -1 // sidecar.Config: negative serves at once
	}
	if c.MaxMemory, err = sidecar.ParseMemory(*maxMemory); err != nil {
		return usageError{fmt.Errorf("--max-memory: %w", err)}
	}
	c.NoEventLoop = !*eventLoop
	if c.Limits.MaxBulk <= 0 {
		return usageError{fmt.Errorf("--max-bulk must be positive, got %d", c.Limits.MaxBulk)}
	}
	if !*useTLS && (tlsOpts.CertFile != "" || tlsOpts.KeyFile != "") {
		return usageError{fmt.Errorf("--tls-cert-file and --tls-key-file need --tls")}
	}
	if *useTLS {
		cfg, err := proxy.ClientTLS(tlsOpts)
		if err != nil {
			return err
		}
		c.TLS = cfg
	}
	for _, a := range strings.Split(*upstream, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Upstreams = append(c.Upstreams, a)
		}
	}
	for _, a := range strings.Split(*sentinels, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Sentinels = append(c.Sentinels, a)
		}
	}
	switch {
	case len(c.Sentinels) > 0 && len(c.Upstreams) > 0:
		return usageError{fmt.Errorf("--upstream and --sentinel are exclusive: name the Redis nodes or the Sentinels")}
	case len(c.Sentinels) > 0 && c.SentinelMaster == "":
		return usageError{fmt.Errorf("--sentinel needs --sentinel-master, the name the Sentinels monitor the master under")}
	case len(c.Sentinels) > 0 && c.Cluster:
		return usageError{fmt.Errorf("--sentinel does not apply to a Redis Cluster (--cluster)")}
	case len(c.Sentinels) == 0 && (c.SentinelUsernameFile != "" || c.SentinelPasswordFile != ""):
		return usageError{fmt.Errorf("--sentinel-username-file and --sentinel-password-file need --sentinel")}
	}
	c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return sidecar.Run(ctx, c)
}
