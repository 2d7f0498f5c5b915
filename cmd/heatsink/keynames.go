package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/internal/scheme"
)

// prepareKeyNames reads (or creates, with a random key) the Secret holding
// the installation's HMAC key of hashed key names, so that a key is shown
// the same way across manager restarts and leaders, and checks
// --key-names. The key is made like the fleet token (hub.EnsureToken: one
// winner when replicas race), under the Secret's key "token".
func prepareKeyNames(ctx context.Context, cfg *rest.Config, wh *webhookConfig) (controllers.KeyNamesOptions, error) {
	switch keynames.Mode(wh.keyNames) {
	case "", keynames.Plain, keynames.Truncated, keynames.Hashed:
	default:
		return controllers.KeyNamesOptions{}, fmt.Errorf("--key-names=%q: want Plain, Truncated or Hashed", wh.keyNames)
	}
	ns := wh.namespace
	if ns == "" {
		ns = podNamespace()
	}
	if ns == "" {
		return controllers.KeyNamesOptions{}, fmt.Errorf("the key names Secret needs the manager's namespace: set --webhook-namespace or POD_NAMESPACE")
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return controllers.KeyNamesOptions{}, err
	}
	key, err := hub.EnsureToken(ctx, cl, types.NamespacedName{Namespace: ns, Name: wh.keyNamesSecret})
	if err != nil {
		return controllers.KeyNamesOptions{}, fmt.Errorf("key names: %w", err)
	}
	return controllers.KeyNamesOptions{Least: keynames.Mode(wh.keyNames), Key: []byte(key), Namespace: ns}, nil
}
