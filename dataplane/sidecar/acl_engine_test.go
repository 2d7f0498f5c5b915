package sidecar_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestSidecarACLMitigatedKeys: the engine's own work on mitigated keys
// under a restricted Redis user (docs/proxy.md, ACL rules of the sidecar's
// user). With the application's rights (~app:* +get +set +incrby) plus
// ~{*}hs:*, +ping and +pttl, a split counter reads and adds exact and a
// replicated key's writes (SET, SET KEEPTTL) reach every replica; without
// ~{*}hs:* the split counter's read fails naming the keys, and without
// +pttl a SET KEEPTTL of the replicated key fails naming 'pttl'.
func TestSidecarACLMitigatedKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	split := routing.Generation{FromEpoch: 0, Shards: 4}
	table := `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[
		{"key":"app:likes","source":"detected","split":{"generations":[{"fromEpoch":0,"shards":4}]}},
		{"key":"app:page","source":"detected","replicate":{"replicas":3,"ttlMillis":600000}}]}`
	file := filepath.Join(t.TempDir(), "routing.json")
	if err := os.WriteFile(file, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	app := []any{"~app:*", "+get", "+set", "+incrby"}
	for _, tc := range []struct {
		user string
		own  []any
		// failing names the operation that must fail and what its error
		// must name; empty: every operation works.
		failing, want string
	}{
		{user: "full", own: []any{"~{*}hs:*", "+ping", "+pttl"}},
		{user: "nohs", own: []any{"+ping", "+pttl"}, failing: "read", want: "access one of the keys"},
		{user: "nopttl", own: []any{"~{*}hs:*", "+ping"}, failing: "keepttl", want: "'pttl'"},
	} {
		t.Run(tc.user, func(t *testing.T) {
			direct.Set(ctx, "app:likes", 10, 0)
			for _, k := range routing.ShardKeys("app:likes", split) {
				direct.Set(ctx, k, 5, 0)
			}
			c, base, stop := runAsUser(t, sidecar.Config{Upstreams: []string{srv.Addr}, Policy: "p", Namespace: "ns", RoutingFile: file},
				[]string{srv.Addr}, append(append([]any{}, app...), tc.own...), tc.user)
			defer stop()
			// With a routing file it serves once its table is in force.
			if _, body := get(t, base+"/readyz"); strings.TrimSpace(body) != "ok" {
				t.Fatalf("/readyz: %s", body)
			}
			errs := map[string]error{}
			got, err := c.Get(ctx, "app:likes").Int()
			if err == nil && got != 30 {
				t.Errorf("the split counter reads %d, want 30 (10 in its base key, 5 in each of 4 shards)", got)
			}
			errs["read"] = err
			if err := c.IncrBy(ctx, "app:likes", 5).Err(); err != nil {
				errs["add"] = err
			} else if got, err := c.Get(ctx, "app:likes").Int(); err == nil && got != 35 {
				t.Errorf("after INCRBY 5 the split counter reads %d, want 35", got)
			}
			errs["set"] = c.Set(ctx, "app:page", "v2", 0).Err()
			errs["keepttl"] = c.Set(ctx, "app:page", "v3", redis.KeepTTL).Err()
			for op, err := range errs {
				switch {
				case op == tc.failing:
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						t.Errorf("%s: error %v, want one naming %s", op, err, tc.want)
					} else {
						t.Logf("%s: %v", op, err)
					}
				case tc.failing == "" && err != nil:
					t.Errorf("%s with the documented rights: %v", op, err)
				}
			}
			if tc.failing == "" {
				for _, r := range routing.ReplicaKeys("app:page", 3) {
					if v, err := direct.Get(ctx, r).Result(); err != nil || v != "v3" {
						t.Errorf("replica %s holds %q, %v; want the written v3", r, v, err)
					}
				}
			}
		})
	}
}
