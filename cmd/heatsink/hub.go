package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/scheme"
)

// fleetConfig holds the manager's fleet server flags.
type fleetConfig struct {
	addr        string
	serviceName string
	tokenSecret string
	tls         bool
}

func bindFleetFlags(fs *flag.FlagSet) *fleetConfig {
	c := &fleetConfig{}
	fs.StringVar(&c.addr, "fleet-bind-address", fmt.Sprintf(":%d", agentlink.DefaultPort), "address of the fleet server node agents stream to (served by the leader only)")
	fs.StringVar(&c.serviceName, "fleet-service-name", "heatsink-fleet", "headless Service of the fleet server, for the certificate's DNS names")
	fs.StringVar(&c.tokenSecret, "fleet-token-secret", "heatsink-fleet-token", "Secret (in the manager's namespace) holding the token node agents present; created with a random token if missing")
	fs.BoolVar(&c.tls, "fleet-tls", true, "serve the fleet over TLS with the webhook server's certificate")
	return c
}

// prepareHub builds the hub: its token (from the Secret, made if
// missing) and its TLS certificate (the webhook server's: the same rotated
// self-signed certificate, or the same directory).
func prepareHub(ctx context.Context, cfg *rest.Config, fc *fleetConfig, wh *webhookConfig) (*hub.Hub, error) {
	ns := wh.namespace
	if ns == "" {
		ns = podNamespace()
	}
	if ns == "" {
		return nil, fmt.Errorf("the fleet token Secret needs the manager's namespace: set --webhook-namespace or POD_NAMESPACE")
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	token, err := hub.EnsureToken(ctx, cl, types.NamespacedName{Namespace: ns, Name: fc.tokenSecret})
	if err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if fc.tls {
		switch {
		case wh.rotator != nil:
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: wh.rotator.GetCertificate}
		case wh.certDir != "":
			w, err := certwatcher.New(filepath.Join(wh.certDir, "tls.crt"), filepath.Join(wh.certDir, "tls.key"))
			if err != nil {
				return nil, fmt.Errorf("fleet certificate: %w", err)
			}
			go func() { _ = w.Start(ctx) }()
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.GetCertificate}
		default:
			return nil, fmt.Errorf("--fleet-tls needs the webhook certificate (self-signed, or --webhook-cert-dir); or set --fleet-tls=false")
		}
	}
	return hub.New(hub.Options{
		Addr: fc.addr, Token: token, TLS: tlsCfg,
		Registerer: ctrlmetrics.Registry, Log: ctrl.Log.WithName("fleet"),
	})
}
