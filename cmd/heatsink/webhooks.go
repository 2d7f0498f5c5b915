package main

import (
	"context"
	"crypto/tls"
	"flag"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	hswebhook "github.com/heatsink-dev/heatsink/webhook"
)

// webhookConfig holds the manager's webhook flags.
type webhookConfig struct {
	enabled bool
	port    int
	certDir string
}

func bindWebhookFlags(fs *flag.FlagSet) *webhookConfig {
	c := &webhookConfig{}
	fs.BoolVar(&c.enabled, "enable-webhooks", true, "serve the admission webhooks")
	fs.IntVar(&c.port, "webhook-port", 9443, "port of the admission webhook server")
	fs.StringVar(&c.certDir, "webhook-cert-dir", "", "directory with tls.crt and tls.key for the webhook server")
	return c
}

// prepareWebhookServer builds the webhook server (and, in time, its
// certificates) before the manager starts.
func prepareWebhookServer(_ context.Context, _ *rest.Config, c *webhookConfig) (webhook.Server, error) {
	return webhook.NewServer(webhook.Options{
		Port:    c.port,
		CertDir: c.certDir,
		TLSOpts: []func(*tls.Config){func(t *tls.Config) { t.MinVersion = tls.VersionTLS12 }},
	}), nil
}

// setupWebhooks registers the admission webhooks.
func setupWebhooks(mgr ctrl.Manager, c *webhookConfig) error {
	if !c.enabled {
		return nil
	}
	return hswebhook.SetupHotKeyPolicyWebhook(mgr)
}
