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
	"github.com/heatsink-dev/heatsink/injectlink"
)

// runSidecar runs the sidecar. Every flag defaults to its environment
// variable (package injectlink), which the injector sets on the container.
func runSidecar(args []string) error {
	sc, err := readSidecar(args, os.LookupEnv)
	if err != nil {
		return err
	}
	c := sc.Config
	if sc.UseTLS {
		cfg, err := proxy.ClientTLS(sc.TLS)
		if err != nil {
			return err
		}
		c.TLS = cfg
	}
	c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return sidecar.Run(ctx, c)
}

// sidecarSettings is what `heatsink sidecar` read from its flags and
// environment: the configuration, with the TLS options still as names of
// files (runSidecar loads them).
type sidecarSettings struct {
	Config sidecar.Config
	UseTLS bool
	TLS    proxy.TLSOptions
}

// readSidecar reads the sidecar's flags, each defaulting to its variable
// looked up with lookupEnv (os.LookupEnv, or a pod's resolved environment in
// TestInjectedPodIsWhatTheSidecarReads), and checks them.
func readSidecar(args []string, lookupEnv func(string) (string, bool)) (sidecarSettings, error) {
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	env := func(k, def string) string {
		if v, ok := lookupEnv(k); ok {
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
		v, ok := lookupEnv(k)
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
	fs.StringVar(&c.Listen, "listen", env(injectlink.EnvListen, injectlink.Listen), "address the application connects to"+envNote(injectlink.EnvListen))
	upstream := fs.String("upstream", env(injectlink.EnvUpstream, ""), "comma-separated Redis host:port (cluster: seeds)"+envNote(injectlink.EnvUpstream))
	fs.BoolVar(&c.Cluster, "cluster", envBool(injectlink.EnvCluster), "upstream is a Redis Cluster"+envNote(injectlink.EnvCluster))
	sentinels := fs.String("sentinel", env(injectlink.EnvSentinelAddresses, ""), "comma-separated Redis Sentinel host:port, instead of --upstream: the master of --sentinel-master is found through them and followed across failovers"+envNote(injectlink.EnvSentinelAddresses))
	fs.StringVar(&c.SentinelMaster, "sentinel-master", env(injectlink.EnvSentinelMaster, ""), "name the Sentinels monitor the master under"+envNote(injectlink.EnvSentinelMaster))
	fs.StringVar(&c.SentinelUsername, "sentinel-username", env(injectlink.EnvSentinelUsername, ""), "ACL user of the Sentinels"+envNote(injectlink.EnvSentinelUsername))
	// As for Redis' password: from the environment or a file only.
	c.SentinelPassword, _ = lookupEnv(injectlink.EnvSentinelPassword)
	fs.StringVar(&c.SentinelUsernameFile, "sentinel-username-file", env(injectlink.EnvSentinelUsernameFile, ""), "file holding the Sentinels' ACL user, read at each new connection to a Sentinel (the injector mounts the Sentinel credentials Secret); replaces --sentinel-username"+envNote(injectlink.EnvSentinelUsernameFile))
	fs.StringVar(&c.SentinelPasswordFile, "sentinel-password-file", env(injectlink.EnvSentinelPasswordFile, ""), "file holding the Sentinels' password (their requirepass or the ACL user's), read at each new connection to a Sentinel, so a rotated Secret needs no restart; replaces "+injectlink.EnvSentinelPassword+envNote(injectlink.EnvSentinelPasswordFile))
	fs.StringVar(&c.Policy, "policy", env(injectlink.EnvPolicy, ""), "HotKeyPolicy name whose routing table to follow"+envNote(injectlink.EnvPolicy))
	fs.StringVar(&c.Namespace, "namespace", env(injectlink.EnvNamespace, ""), "namespace of the policy"+envNote(injectlink.EnvNamespace))
	fs.StringVar(&c.RoutingFile, "routing-file", env(injectlink.EnvRoutingFile, injectlink.RoutingFile), "mounted routing table, the fallback when the node agent is away; empty: none"+envNote(injectlink.EnvRoutingFile))
	fs.StringVar(&c.NodeAgent, "node-agent", env(injectlink.EnvNodeAgent, ""), "host:port of the node agent: counts go to it over UDP, routing tables come from it over TCP; empty: no reports, routing from the file only"+envNote(injectlink.EnvNodeAgent))
	fs.StringVar(&c.Username, "redis-username", env(injectlink.EnvRedisUsername, ""), "upstream ACL user"+envNote(injectlink.EnvRedisUsername))
	// The password comes from the environment or a file only: a flag would
	// show it in ps and in the pod's command line.
	c.Password, _ = lookupEnv(injectlink.EnvRedisPassword)
	fs.StringVar(&c.UsernameFile, "redis-username-file", env(injectlink.EnvRedisUsernameFile, ""), "file holding the upstream ACL user, read at each new connection to Redis (the injector mounts the policy's credentials Secret); replaces --redis-username"+envNote(injectlink.EnvRedisUsernameFile))
	fs.StringVar(&c.PasswordFile, "redis-password-file", env(injectlink.EnvRedisPasswordFile, ""), "file holding the upstream password, read at each new connection to Redis, so a rotated Secret needs no restart; replaces "+injectlink.EnvRedisPassword+envNote(injectlink.EnvRedisPasswordFile))
	useTLS := fs.Bool("tls", envBool(injectlink.EnvTLS), "connect to Redis over TLS"+envNote(injectlink.EnvTLS))
	var tlsOpts proxy.TLSOptions
	fs.StringVar(&tlsOpts.CAFile, "tls-ca-file", env(injectlink.EnvTLSCAFile, ""), "PEM bundle of the CAs that sign Redis' certificate; empty uses the system roots"+envNote(injectlink.EnvTLSCAFile))
	fs.StringVar(&tlsOpts.ServerName, "tls-server-name", env(injectlink.EnvTLSServerName, ""), "name to verify in Redis' certificate; empty uses each address's host"+envNote(injectlink.EnvTLSServerName))
	fs.StringVar(&tlsOpts.CertFile, "tls-cert-file", env(injectlink.EnvTLSCertFile, ""), "PEM client certificate presented to Redis (tls-auth-clients yes), re-read when it changes"+envNote(injectlink.EnvTLSCertFile))
	fs.StringVar(&tlsOpts.KeyFile, "tls-key-file", env(injectlink.EnvTLSKeyFile, ""), "PEM key of --tls-cert-file"+envNote(injectlink.EnvTLSKeyFile))
	fs.BoolVar(&tlsOpts.InsecureSkipVerify, "tls-insecure-skip-verify", envBool(injectlink.EnvTLSInsecureSkipVerify), "do not verify Redis' certificate"+envNote(injectlink.EnvTLSInsecureSkipVerify))
	c.Limits = proxy.DefaultClientLimits()
	fs.IntVar(&c.Limits.MaxBulk, "max-bulk", envInt(injectlink.EnvMaxBulk, c.Limits.MaxBulk), "largest bulk string accepted from a client, in bytes: Redis' proto-max-bulk-len; values over 1 MiB are streamed, not held"+envNote(injectlink.EnvMaxBulk))
	eventLoop := fs.Bool("event-loop", !envBool(injectlink.EnvNoEventLoop), "serve stateless clients from one epoll event loop (Linux, plaintext or TLS upstream); false gives every client a goroutine"+envNote(injectlink.EnvNoEventLoop, "=true"))
	fs.StringVar(&c.HTTPAddress, "http-address", env(injectlink.EnvHTTPAddress, injectlink.HTTPAddress), "address of /metrics, /healthz, /readyz, /startupz"+envNote(injectlink.EnvHTTPAddress))
	replyTimeout := fs.String("reply-timeout", env(injectlink.EnvReplyTimeout, "0"), "if set (e.g. 30s), the longest the proxy waits for a Redis reply before answering an error; 0, the default, waits as long as Redis takes, like a direct connection"+envNote(injectlink.EnvReplyTimeout))
	startupWait := fs.String("startup-wait", env(injectlink.EnvStartupWait, sidecar.DefaultStartupWait.String()), "the longest the proxy holds its clients at start (they connect, their commands wait) until it has the routing table in force, from the node agent or the mounted file; past it, it serves without the table and says so (log, heatsink_proxy_serving_unmitigated, /startupz); 0 serves at once"+envNote(injectlink.EnvStartupWait))
	maxMemory := fs.String("max-memory", env(injectlink.EnvMaxMemory, ""), "the sidecar's memory ceiling (bytes or a quantity such as 192Mi); empty: 75% of the container's memory limit, or 192Mi (75% of the injected 256Mi) without one"+envNote(injectlink.EnvMaxMemory))
	if err := parseFlags(fs, args, "Runs the sidecar: a RESP proxy on 127.0.0.1 that forwards every command, counts key accesses for the node agent and applies the policy's routing table. Every flag defaults to the environment variable its help names, which the injector sets."); err != nil {
		return sidecarSettings{}, err
	}
	if envErr != nil {
		return sidecarSettings{}, usageError{envErr}
	}
	var err error
	if c.ReplyTimeout, err = time.ParseDuration(*replyTimeout); err != nil || c.ReplyTimeout < 0 {
		return sidecarSettings{}, usageError{fmt.Errorf("--reply-timeout=%q: want a non-negative duration such as 30s or 0", *replyTimeout)}
	}
	if c.StartupWait, err = time.ParseDuration(*startupWait); err != nil || c.StartupWait < 0 {
		return sidecarSettings{}, usageError{fmt.Errorf("--startup-wait=%q: want a non-negative duration such as 10s, or 0", *startupWait)}
	}
	if c.StartupWait == 0 {
		c.StartupWait = -1 // sidecar.Config: negative serves at once
	}
	if c.MaxMemory, err = sidecar.ParseMemory(*maxMemory); err != nil {
		return sidecarSettings{}, usageError{fmt.Errorf("--max-memory: %w", err)}
	}
	c.NoEventLoop = !*eventLoop
	if c.Limits.MaxBulk <= 0 {
		return sidecarSettings{}, usageError{fmt.Errorf("--max-bulk must be positive, got %d", c.Limits.MaxBulk)}
	}
	if !*useTLS && (tlsOpts.CertFile != "" || tlsOpts.KeyFile != "") {
		return sidecarSettings{}, usageError{fmt.Errorf("--tls-cert-file and --tls-key-file need --tls")}
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
		return sidecarSettings{}, usageError{fmt.Errorf("--upstream and --sentinel are exclusive: name the Redis nodes or the Sentinels")}
	case len(c.Sentinels) > 0 && c.SentinelMaster == "":
		return sidecarSettings{}, usageError{fmt.Errorf("--sentinel needs --sentinel-master, the name the Sentinels monitor the master under")}
	case len(c.Sentinels) > 0 && c.Cluster:
		return sidecarSettings{}, usageError{fmt.Errorf("--sentinel does not apply to a Redis Cluster (--cluster)")}
	case len(c.Sentinels) == 0 && (c.SentinelUsernameFile != "" || c.SentinelPasswordFile != ""):
		return sidecarSettings{}, usageError{fmt.Errorf("--sentinel-username-file and --sentinel-password-file need --sentinel")}
	}
	return sidecarSettings{Config: c, UseTLS: *useTLS, TLS: tlsOpts}, nil
}

// envNote is the end of a flag's help: the variable it defaults to (with
// the value that sets it, for an inverted flag).
func envNote(name string, value ...string) string {
	return " (" + name + strings.Join(value, "") + ")"
}
