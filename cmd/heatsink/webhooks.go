package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/certs"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/internal/scheme"
	hswebhook "github.com/heatsink-dev/heatsink/webhook"
)

// Certificate sources of the webhook server.
const (
	// certSourceSelfSigned: the manager generates and rotates a CA and
	// serving certificate (internal/certs). Works without cert-manager.
	certSourceSelfSigned = "self-signed"
	// certSourceDir: tls.crt and tls.key are read (and re-read on change)
	// from --webhook-cert-dir, e.g. a Secret written by cert-manager.
	certSourceDir = "dir"
)

// managerContainer is the name of the manager's container in its Pod (chart
// and config/manager), whose image the sidecar gets by default.
const managerContainer = "manager"

// webhookConfig holds the manager's webhook flags.
type webhookConfig struct {
	enabled    bool
	port       int
	certDir    string
	certSource string

	namespace         string
	serviceName       string
	certSecretName    string
	mutatingConfig    string
	validatingConfig  string
	certCheckInterval time.Duration
	certExtraNames    string

	inject             bool
	proxyImage         string
	proxyPullPolicy    string
	proxyCPURequest    string
	proxyMemoryRequest string
	proxyCPULimit      string
	proxyMemoryLimit   string
	nodeAgentAddress   string
	routingFile        bool
	// keyNames is the installer's least key-name mode (--key-names), and
	// keyNamesSecret the Secret holding the HMAC key (keynames.go).
	keyNames       string
	keyNamesSecret string

	// targets are the installer's target choices, applied by the policy
	// webhook, the injector and the reconciler alike.
	targets targets.Options

	// rotator is set by prepareWebhookServer with self-signed certificates.
	rotator *certs.Rotator
}

func bindWebhookFlags(fs *flag.FlagSet) *webhookConfig {
	c := &webhookConfig{}
	fs.BoolVar(&c.enabled, "enable-webhooks", true, "serve the admission webhooks")
	fs.IntVar(&c.port, "webhook-port", 9443, "port of the admission webhook server")
	fs.StringVar(&c.certDir, "webhook-cert-dir", "", "directory with tls.crt and tls.key for the webhook server (with --webhook-cert-source=dir)")
	fs.StringVar(&c.certSource, "webhook-cert-source", certSourceSelfSigned, "where the webhook certificate comes from: self-signed (generated, rotated, kept in a Secret) or dir (--webhook-cert-dir, e.g. cert-manager)")
	fs.StringVar(&c.namespace, "webhook-namespace", "", "namespace of the webhook Service and certificate Secret; default: the pod's namespace")
	fs.StringVar(&c.serviceName, "webhook-service-name", "heatsink-webhook-service", "name of the webhook Service, for the certificate's DNS names")
	fs.StringVar(&c.certSecretName, "webhook-cert-secret", "heatsink-webhook-cert", "Secret holding the self-signed CA and serving certificate")
	fs.StringVar(&c.mutatingConfig, "mutating-webhook-configuration", "heatsink-mutating-webhook-configuration", "MutatingWebhookConfiguration whose caBundle the manager sets (self-signed only)")
	fs.StringVar(&c.validatingConfig, "validating-webhook-configuration", "heatsink-validating-webhook-configuration", "ValidatingWebhookConfiguration whose caBundle the manager sets (self-signed only)")
	fs.StringVar(&c.certExtraNames, "webhook-cert-extra-names", "", "comma-separated extra DNS names for the self-signed serving certificate, for webhooks called by URL (e.g. a manager run outside the cluster)")
	fs.DurationVar(&c.certCheckInterval, "webhook-cert-check-interval", 10*time.Minute, "how often the self-signed certificates are checked for renewal")
	fs.BoolVar(&c.inject, "enable-sidecar-injection", true, "serve the sidecar injection webhook for pods annotated heatsink.dev/inject")
	fs.StringVar(&c.proxyImage, "proxy-image", "", "image of the injected proxy sidecar (runs `heatsink sidecar`); empty: the manager's own image, read from its Pod ($POD_NAME, container \"manager\"), so an image override of the install cannot leave the sidecars on another version")
	fs.StringVar(&c.proxyPullPolicy, "proxy-image-pull-policy", "", "pull policy of the injected sidecar: Always, IfNotPresent, Never; empty for the API default")
	fs.StringVar(&c.nodeAgentAddress, "node-agent-address", "", "node agent address the injected sidecar sends counts to (UDP) and reads routing tables from (TCP), e.g. the node-local Service heatsink-node-agent.heatsink-system.svc:7946 (in a manifest, heatsink-node-agent.$(POD_NAMESPACE).svc:7946 follows the install's namespace); empty: the agent's hostPort on the pod's node")
	fs.BoolVar(&c.routingFile, "inject-routing-file", false, "also mount each policy's routing ConfigMap into injected pods, as a fallback for when the node agent is away (each node's kubelet then watches it)")
	fs.BoolVar(&c.targets.AllowRawAddresses, "allow-raw-target-addresses", false, "admit policies that write Redis addresses themselves (spec.target.addresses, spec.target.sentinel, mitigations.replicaReads.addresses) instead of naming a ClusterRedisTarget or a Service of their namespace: anyone who may write a policy can then make the manager connect to, and write into, any Redis it can reach (docs/install.md, Security model)")
	fs.StringVar(&c.keyNames, "key-names", "", "the least every policy's key names are hidden where namespace readers see them (status, HotKeyReport, Events, routing ConfigMap): Truncated or Hashed; empty or Plain: each policy's spec.keyNames (docs/install.md, Who can read key names)")
	fs.StringVar(&c.keyNamesSecret, "key-names-secret", "heatsink-key-names", "Secret (in the manager's namespace) holding the HMAC key of hashed key names; created with a random key if missing")
	d := hswebhook.DefaultProxyResources()
	fs.StringVar(&c.proxyCPURequest, "proxy-cpu-request", d.Requests.Cpu().String(), "CPU request of the injected sidecar")
	fs.StringVar(&c.proxyMemoryRequest, "proxy-memory-request", d.Requests.Memory().String(), "memory request of the injected sidecar")
	fs.StringVar(&c.proxyCPULimit, "proxy-cpu-limit", d.Limits.Cpu().String(), "CPU limit of the injected sidecar; empty for none")
	fs.StringVar(&c.proxyMemoryLimit, "proxy-memory-limit", d.Limits.Memory().String(), "memory limit of the injected sidecar; empty for none")
	return c
}

// podNamespace is the namespace the manager runs in, from the service
// account mount; empty outside a cluster.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// prepareWebhookServer builds the webhook server and, with self-signed
// certificates, loads (or creates) its certificate before the manager starts,
// so that the server never starts without one.
func prepareWebhookServer(ctx context.Context, cfg *rest.Config, c *webhookConfig, fc *fleetConfig, tlsOpts []func(*tls.Config)) (webhook.Server, error) {
	switch c.certSource {
	case certSourceDir:
	case certSourceSelfSigned:
		if !c.enabled {
			break
		}
		r, err := newRotator(cfg, c, fc)
		if err != nil {
			return nil, err
		}
		syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err = r.Sync(syncCtx)
		cancel()
		if err != nil && !r.Loaded() {
			return nil, fmt.Errorf("webhook certificate: %w", err)
		}
		if err != nil {
			// The Secret is there but a webhook configuration could not be
			// patched yet (e.g. applied after the manager): the rotator
			// retries in the background.
			r.Log.Error(err, "caBundle not set yet; retrying in the background")
		}
		c.rotator = r
		tlsOpts = append(tlsOpts, func(t *tls.Config) { t.GetCertificate = r.GetCertificate })
	default:
		return nil, fmt.Errorf("--webhook-cert-source=%q: want %s or %s", c.certSource, certSourceSelfSigned, certSourceDir)
	}
	return webhook.NewServer(webhook.Options{
		Port:    c.port,
		CertDir: c.certDir,
		TLSOpts: tlsOpts,
	}), nil
}

func newRotator(cfg *rest.Config, c *webhookConfig, fc *fleetConfig) (*certs.Rotator, error) {
	ns := c.namespace
	if ns == "" {
		ns = podNamespace()
	}
	if ns == "" {
		return nil, errors.New("self-signed webhook certificates need the manager's namespace: set --webhook-namespace or POD_NAMESPACE")
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	svc := c.serviceName + "." + ns + ".svc"
	names := []string{svc, svc + ".cluster.local"}
	if fc != nil && fc.serviceName != "" {
		// The fleet server presents the same certificate.
		fsvc := fc.serviceName + "." + ns + ".svc"
		names = append(names, fsvc, fsvc+".cluster.local")
	}
	for _, n := range strings.Split(c.certExtraNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return &certs.Rotator{
		Client:             cl,
		Secret:             types.NamespacedName{Namespace: ns, Name: c.certSecretName},
		MutatingWebhooks:   nonEmpty(c.mutatingConfig),
		ValidatingWebhooks: nonEmpty(c.validatingConfig),
		Config:             certs.Config{DNSNames: names},
		Interval:           c.certCheckInterval,
		Log:                ctrl.Log.WithName("webhook-certs"),
	}, nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// injectorConfig turns the proxy flags into the injector's configuration.
func (c *webhookConfig) injectorConfig() (hswebhook.InjectorConfig, error) {
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, q := range []struct {
		flag, value string
		list        corev1.ResourceList
		name        corev1.ResourceName
	}{
		{"proxy-cpu-request", c.proxyCPURequest, res.Requests, corev1.ResourceCPU},
		{"proxy-memory-request", c.proxyMemoryRequest, res.Requests, corev1.ResourceMemory},
		{"proxy-cpu-limit", c.proxyCPULimit, res.Limits, corev1.ResourceCPU},
		{"proxy-memory-limit", c.proxyMemoryLimit, res.Limits, corev1.ResourceMemory},
	} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil {
			return hswebhook.InjectorConfig{}, fmt.Errorf("--%s=%q: %w", q.flag, q.value, err)
		}
		q.list[q.name] = v
	}
	switch p := corev1.PullPolicy(c.proxyPullPolicy); p {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return hswebhook.InjectorConfig{}, fmt.Errorf("--proxy-image-pull-policy=%q: want Always, IfNotPresent or Never", p)
	}
	return hswebhook.InjectorConfig{Image: c.proxyImage, PullPolicy: corev1.PullPolicy(c.proxyPullPolicy), Resources: res, NodeAgentAddress: c.nodeAgentAddress, RoutingFile: c.routingFile, KeyNamesLeast: keynames.Mode(c.keyNames), Targets: c.targets}, nil
}

// setupWebhooks registers the admission webhooks and, with self-signed
// certificates, the rotator that keeps them current on every replica.
func setupWebhooks(ctx context.Context, mgr ctrl.Manager, c *webhookConfig) error {
	if !c.enabled {
		return nil
	}
	if c.rotator != nil {
		if err := mgr.Add(c.rotator); err != nil {
			return err
		}
	}
	if err := hswebhook.SetupHotKeyPolicyWebhook(mgr, c.targets); err != nil {
		return err
	}
	if !c.inject {
		return nil
	}
	ic, err := c.injectorConfig()
	if err != nil {
		return err
	}
	if ic.Image == "" {
		if ic.Image, err = hswebhook.OwnImage(ctx, mgr.GetAPIReader(), podNamespace(), os.Getenv("POD_NAME"), managerContainer); err != nil {
			return fmt.Errorf("--proxy-image is empty and the manager's own image is unknown: %w", err)
		}
		ctrl.Log.Info("sidecar image: the manager's own", "image", ic.Image)
	}
	return hswebhook.SetupInjectionWebhook(mgr, ic)
}
