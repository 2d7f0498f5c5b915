package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoHarness keeps the shipped binary lean: the sidecar runs in
// every application pod, so nothing made for tests or the demo (envtest,
// the Redis and API-server harnesses, the demo itself) may reach it.
func TestBinaryLinksNoHarness(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"sigs.k8s.io/controller-runtime/pkg/envtest",
		"github.com/heatsink-dev/heatsink/internal/testing/",
		"github.com/heatsink-dev/heatsink/demo",
		"testing",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(dep, f+"/")) {
				t.Errorf("cmd/heatsink links %s", dep)
			}
		}
	}
}
