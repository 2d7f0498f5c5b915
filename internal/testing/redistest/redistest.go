// Package redistest starts real redis-server processes for tests and stops
// them when the test ends.
package redistest

import (
	"context"
	"testing"

	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
)

// Standalone starts a redis-server for the test and stops it at cleanup.
func Standalone(tb testing.TB, extraArgs ...string) *redisproc.Server {
	tb.Helper()
	s, err := redisproc.Start(context.Background(), redisproc.Options{ExtraArgs: extraArgs})
	if err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Cluster starts a 3-master Redis Cluster for the test and stops it at cleanup.
func Cluster(tb testing.TB) *redisproc.Cluster {
	tb.Helper()
	c, err := redisproc.StartCluster(context.Background(), 3)
	if err != nil {
		tb.Fatalf("start redis cluster: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// Sentinel starts a master, its replicas and the Sentinels that monitor it
// (redisproc.StartSentinel) and stops them at cleanup.
func Sentinel(tb testing.TB, opts redisproc.SentinelOptions) *redisproc.Sentinel {
	tb.Helper()
	s, err := redisproc.StartSentinel(context.Background(), opts)
	if err != nil {
		tb.Fatalf("start redis sentinel: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// ClusterReplicas starts a 3-master Redis Cluster with replicas replicas
// per master for the test and stops it at cleanup.
func ClusterReplicas(tb testing.TB, replicas int) *redisproc.Cluster {
	tb.Helper()
	c, err := redisproc.StartClusterReplicas(context.Background(), 3, replicas)
	if err != nil {
		tb.Fatalf("start redis cluster with replicas: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// Replicated starts a standalone master with replicas replicas for the
// test and stops them at cleanup.
func Replicated(tb testing.TB, replicas int) *redisproc.Replicated {
	tb.Helper()
	r, err := redisproc.StartReplicated(context.Background(), replicas)
	if err != nil {
		tb.Fatalf("start redis master with replicas: %v", err)
	}
	tb.Cleanup(r.Stop)
	return r
}
