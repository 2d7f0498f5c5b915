package netns

import (
	"os/exec"
	"testing"
)

// ForTest builds the topology for tb and removes it at cleanup; it skips tb,
// saying why, where the topology cannot be built or one of the binaries
// named is missing.
func ForTest(tb testing.TB, binaries ...string) *Net {
	tb.Helper()
	if err := Available(); err != nil {
		tb.Skip("capture in network namespaces: " + err.Error())
	}
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			tb.Skip("capture in network namespaces: needs " + b)
		}
	}
	n, err := New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(n.Close)
	return n
}

// Redis starts redis-server in namespace ns (StartRedis) and stops it at
// tb's cleanup.
func Redis(tb testing.TB, ns, addr string, port int, extra ...string) {
	tb.Helper()
	stop, err := StartRedis(ns, addr, port, extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
}
