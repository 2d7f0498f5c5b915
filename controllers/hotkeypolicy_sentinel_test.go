package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestDialRedisThroughSentinel opens the manager's client to a Sentinel
// target (real Sentinels, with passwords of their own and of the data
// nodes): it reaches the master, and after SENTINEL FAILOVER the new one.
func TestDialRedisThroughSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and redis-sentinel; skipped with -short")
	}
	h := redistest.Sentinel(t, redisproc.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	target := v1alpha1.RedisTarget{Sentinel: &v1alpha1.RedisSentinel{Addresses: h.SentinelAddrs(), MasterName: h.Opts.MasterName}}
	c, err := DialRedis(target, Credentials{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	role := func() (string, error) {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(info, "\r\n") {
			if r, ok := strings.CutPrefix(l, "role:"); ok {
				return r, nil
			}
		}
		return "", errors.New("no role in INFO")
	}
	if r, err := role(); err != nil || r != "master" {
		t.Fatalf("the client reaches a %q (%v), want the master", r, err)
	}
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	// The FailoverClient follows +switch-master: writes succeed again on
	// the new master, and the value written before is there.
	eventually.Succeeds(t, 20*time.Second, func() error {
		if r, err := role(); err != nil || r != "master" {
			return errors.New("not on a master yet")
		}
		return c.Set(ctx, "k2", "after", 0).Err()
	})
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "before" {
		t.Fatalf("GET k = %q, %v after the failover; want before", v, err)
	}
}
