// Package heatsinkbin finds the heatsink binary for tests that run it as
// the chart and the injector do: as a process of its own.
package heatsinkbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Path is $HEATSINK_BIN when it names a file (make test builds it), else
// the binary built from this tree into the test's temporary directory.
func Path(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("HEATSINK_BIN"); b != "" {
		if _, err := os.Stat(b); err == nil {
			return b
		}
	}
	out := filepath.Join(t.TempDir(), "heatsink")
	cmd := exec.Command("go", "build", "-o", out, "github.com/heatsink-dev/heatsink/cmd/heatsink")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}
