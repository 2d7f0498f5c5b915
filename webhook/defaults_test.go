package webhook_test

import (
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/webhook"
)

// The sidecar derives its memory ceiling from its container's limit, and
// falls back to the injector's default when it reads none: the two must
// be the same number (docs/proxy.md, Memory defaults).
func TestInjectedMemoryLimitMatchesSidecar(t *testing.T) {
	limits := webhook.DefaultProxyResources().Limits
	got := limits.Memory().Value()
	if got != sidecar.InjectedMemoryLimit {
		t.Fatalf("the injector's default memory limit is %d bytes, the sidecar assumes %d (sidecar.InjectedMemoryLimit)", got, sidecar.InjectedMemoryLimit)
	}
}
