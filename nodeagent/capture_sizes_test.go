//go:build linux

package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
)

// TestCaptureReplySizesReachBigKeys: a real agent and hub, its capture
// following replies; a go-redis client with no sidecar reads a 20 MB
// string among small keys from a real redis-server, and the manager's
// big-key list, the one sidecars feed, shows it first with its reply's
// size (the value was written unseen, from the server's namespace).
func TestCaptureReplySizesReachBigKeys(t *testing.T) {
	n := netns.ForTest(t, "redis-server")
	netns.Redis(t, n.Server, netns.ServerIP, 6379)
	redisAddr := netns.ServerIP + ":6379"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: netns.Dialer(n.Server, "")})
	defer admin.Close()
	eventually.Succeeds(t, 20*time.Second, func() error { return admin.Ping(ctx).Err() })
	const size = 20 << 20
	if err := admin.Set(ctx, "product:blob", strings.Repeat("b", size), 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := admin.Set(ctx, fmt.Sprintf("product:small:%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var c *capture.Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = capture.Open(capture.Config{ReplySampleEvery: 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h := startOpts(t, func(spec *v1alpha1.HotKeyPolicySpec) {
		spec.Target.Addresses = []string{redisAddr}
	}, func(o *Options) { o.Capture = c })
	h.hub.UpsertUninjectedPod("shop/plain-0", node, netns.ClientIP)
	eventually.True(t, 20*time.Second, "the capture's scope", func() bool { s := c.Stats(); return s.Targets == 1 && s.Endpoints == 1 && s.Pods == 1 })

	app := redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: netns.Dialer(n.Client, netns.ClientIP), PoolSize: 1})
	defer app.Close()
	for i := range 100 {
		if err := app.Get(ctx, fmt.Sprintf("product:small:%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
		if i == 50 {
			if v, err := app.Get(ctx, "product:blob").Result(); err != nil || len(v) != size {
				t.Fatalf("GET product:blob: %d bytes, %v", len(v), err)
			}
		}
	}
	eventually.True(t, 20*time.Second, "every read counted", func() bool {
		p := h.d.policies[policy]
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.reads >= 101
	})
	h.step()
	want := uint64(1 + len(fmt.Sprint(size)) + 2 + size + 2)
	eventually.True(t, 20*time.Second, "product:blob first among the manager's big keys", func() bool {
		snap, _ := h.hub.Snapshot(policy)
		return len(snap.BigKeys) > 0 && snap.BigKeys[0].Key == "product:blob" && snap.BigKeys[0].Bytes == want
	})
	snap, _ := h.hub.Snapshot(policy)
	for _, k := range snap.BigKeys[1:] {
		if k.Bytes != 7 { // "$1\r\nv\r\n"
			t.Errorf("%s listed at %d bytes, read at 7", k.Key, k.Bytes)
		}
	}
	t.Logf("big keys at the manager: %v", snap.BigKeys[:min(3, len(snap.BigKeys))])
}
