package sentinel_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/sentinel"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestFollowerFollowsFailover finds the master through three real
// Sentinels, fails it over, and checks that the follower names the new
// master once, soon after the Sentinels do.
func TestFollowerFollowsFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and redis-sentinel; skipped with -short")
	}
	h := redistest.Sentinel(t, redisproc.SentinelOptions{})
	old, err := h.Master()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var switches []string
	var at time.Time
	f, err := sentinel.New(sentinel.Options{
		Addrs: h.SentinelAddrs(), MasterName: h.Opts.MasterName,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		OnSwitch: func(_, addr string) {
			mu.Lock()
			defer mu.Unlock()
			switches = append(switches, addr)
			at = time.Now()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got, err := f.Discover(ctx)
	if err != nil || got != old {
		t.Fatalf("Discover = %q, %v; want %s", got, err, old)
	}
	go f.Run(ctx)
	start := time.Now()
	newMaster, err := h.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the follower names the new master", func() bool { return f.Master() == newMaster })
	mu.Lock()
	defer mu.Unlock()
	if len(switches) != 1 || switches[0] != newMaster {
		t.Errorf("switches %v, want one to %s", switches, newMaster)
	}
	t.Logf("switched to %s %v after SENTINEL FAILOVER", newMaster, at.Sub(start))
}
