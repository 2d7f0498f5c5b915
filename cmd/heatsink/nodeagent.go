package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/internal/version"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// runNodeAgent runs one node's agent (the DaemonSet's container). It makes
// no API call: policies, pods and routing tables come from the manager.
func runNodeAgent(args []string) error {
	fs := flag.NewFlagSet("node-agent", flag.ContinueOnError)
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "the node this agent serves (default $NODE_NAME, from the downward API)")
	listen := fs.String("listen", fmt.Sprintf(":%d", sidecarlink.DefaultPort), "address sidecars send their counts to (UDP) and read routing tables from (TCP)")
	manager := fs.String("manager-address", fmt.Sprintf("heatsink-fleet.heatsink-system.svc:%d", agentlink.DefaultPort), "host:port of the managers' fleet server; a host that resolves to every manager (a headless Service): the agent stays with the leader")
	tokenFile := fs.String("token-file", "/var/run/heatsink/fleet/token", "file holding the fleet token (the mounted Secret the manager creates); read before each connection, so the agent may start before it exists")
	caFile := fs.String("tls-ca-file", "/var/run/heatsink/fleet-ca/ca-bundle.crt", "PEM bundle of the CAs of the manager's fleet certificate; empty: plaintext")
	serverName := fs.String("tls-server-name", "", "name to verify in the manager's certificate; empty: the host of --manager-address")
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	memory := fs.Int("memory-per-policy", nodeagent.DefaultMemoryPerPolicy, "sketch memory budget per policy, in bytes")
	sourceRate := fs.Float64("source-rate", nodeagent.DefaultSourceRate, "entries per second one pod may send; excess batches are dropped and counted")
	captureOn := fs.Bool("capture", false, "also count the traffic that the node's pods without a sidecar send to the policies' Redis, by packet capture (needs CAP_NET_RAW and the host's network namespace; docs/capture.md)")
	captureIf := fs.String("capture-interface", "", "the one interface to capture on; empty: every interface of the node")
	captureSample := fs.Uint("capture-sample", 1, "capture one client connection in N (whole, chosen in the kernel by a hash of its address and port); counts are multiplied by N")
	captureReplies := fs.Uint("capture-reply-sample", capture.DefaultReplySampleEvery, "also capture the replies (their headers: the sizes of the keys read, for big keys) of one captured connection in N, chosen by the same hash; 0: none")
	captureFlows := fs.Int("capture-max-flows", capture.DefaultMaxFlows, "connections the capture tracks at most")
	opts := zap.Options{}
	opts.BindFlags(fs)
	if err := parseFlags(fs, args, "Runs a node's agent (DaemonSet): receives the sidecars' access counts, keeps a heavy-hitter sketch per policy, streams summaries to the manager and serves routing tables to the sidecars. It makes no API call."); err != nil {
		return err
	}
	if *nodeName == "" {
		return usageError{errors.New("--node-name or $NODE_NAME is required")}
	}
	var tlsCfg *tls.Config
	if *caFile != "" {
		name := *serverName
		if name == "" {
			var err error
			if name, _, err = net.SplitHostPort(*manager); err != nil {
				return usageError{fmt.Errorf("--manager-address: %w", err)}
			}
		}
		// Read at each handshake: the Secret may be mounted, or its CA
		// rotated, after the agent started.
		tlsCfg = reloadingTLS(*caFile, name)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	ctx := ctrl.SetupSignalHandler()
	var c *capture.Capture
	if *captureOn {
		if *captureSample == 0 || *captureSample > 1<<16 {
			return usageError{errors.New("--capture-sample must be 1..65536")}
		}
		if *captureReplies > 1<<16-1 {
			return usageError{errors.New("--capture-reply-sample must be 0..65535")}
		}
		var err error
		if c, err = capture.Open(capture.Config{Interface: *captureIf, SampleEvery: uint32(*captureSample),
			ReplySampleEvery: uint32(*captureReplies), Limits: capture.Limits{MaxFlows: *captureFlows}}); err != nil {
			return err
		}
	}
	ctrlmetrics.Registry.MustRegister(version.Collectors("node-agent")...)
	d, err := nodeagent.New(nodeagent.Options{
		Capture:         c,
		NodeName:        *nodeName,
		ListenAddr:      *listen,
		Manager:         *manager,
		TokenFile:       *tokenFile,
		TLS:             tlsCfg,
		MemoryPerPolicy: *memory,
		SourceRate:      *sourceRate,
		Registerer:      ctrlmetrics.Registry,
		MetricsAddr:     *metricsAddr,
		ProbeAddr:       *probeAddr,
	})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// loadCAs reads a PEM bundle of CA certificates.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("fleet CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("fleet CA: no certificate in %s", file)
	}
	return pool, nil
}

// reloadingTLS verifies the manager's certificate against the CA file as it
// is at each handshake: the file is a mounted Secret that the kubelet
// updates in place when the manager rotates its CA, so a long-running agent
// follows the rotation without a restart. The standard verification is
// replaced, not skipped: VerifyConnection checks the chain and the name.
func reloadingTLS(caFile, serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         serverName,
		InsecureSkipVerify: true, // verified by VerifyConnection, with fresh roots
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("fleet: the manager presented no certificate")
			}
			roots, err := loadCAs(caFile)
			if err != nil {
				return err
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: serverName})
			return err
		},
	}
}
