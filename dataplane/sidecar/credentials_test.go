package sidecar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
)

// TestSidecarRotatedCredentials runs the whole sidecar with its credentials
// in files (as the injector mounts the credentials Secret) against a real
// Redis. The ACL user's password is changed and the files rewritten (as
// the kubelet does when the Secret changes): connections opened after that
// authenticate with the new password, and connections opened before keep
// working, all without a restart.
func TestSidecarRotatedCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t, "--requirepass", "admin-pw")
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "admin-pw"})
	defer direct.Close()
	if err := direct.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw-1", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	userFile, passFile := filepath.Join(dir, "username"), filepath.Join(dir, "password")
	testpki.WriteFile(t, userFile, []byte("app"))
	testpki.WriteFile(t, passFile, []byte("pw-1"))

	ln := listen(t)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(runCtx, sidecar.Config{
			Listener: ln, Upstreams: []string{srv.Addr}, UsernameFile: userFile, PasswordFile: passFile,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
	defer c.Close()
	if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatalf("SET through the sidecar as app: %v", err)
	}
	before := c.Conn() // its own upstream connection (SELECT), opened now
	defer before.Close()
	if err := before.Select(ctx, 1).Err(); err != nil {
		t.Fatal(err)
	}

	if err := direct.Do(ctx, "ACL", "SETUSER", "app", "resetpass", ">pw-2").Err(); err != nil {
		t.Fatal(err)
	}
	testpki.WriteFile(t, passFile, []byte("pw-2"))
	old := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "app", Password: "pw-1", MaxRetries: -1})
	defer old.Close()
	if err := old.Ping(ctx).Err(); err == nil {
		t.Fatal("Redis still accepts the old password: the checks below would prove nothing")
	}
	// More sessions than the proxy keeps dialled ahead (its warm pool,
	// authenticated before the change and still valid), so the last ones
	// reach Redis on connections authenticated with the new password.
	for i := range 4 {
		after := c.Conn()
		defer after.Close()
		if err := after.Select(ctx, 2).Err(); err != nil {
			t.Fatalf("connection %d opened after the password changed: %v", i, err)
		}
		if err := after.Set(ctx, "k2", "rotated", 0).Err(); err != nil {
			t.Fatalf("SET on connection %d opened after the password changed: %v", i, err)
		}
	}
	if err := before.Set(ctx, "k1", "still", 0).Err(); err != nil {
		t.Fatalf("a connection opened before the change stopped working: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v1" {
		t.Fatalf("shared connections after the change: %q, %v", got, err)
	}
}

// TestSidecarACL: a Redis user with the sidecar's own rules (docs/proxy.md,
// Hardened Redis: +ping, and +cluster|slots in cluster mode) plus the
// application's commands serves the application, and /readyz names the
// command a user with one of those rules fewer lacks: against a standalone
// Redis and a 3-master cluster (the user set on every master).
func TestSidecarACL(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	ctx := context.Background()
	app := []any{"~app:*", "~{*}hs:*", "+get", "+set"} // the application's own rights
	type row struct {
		user      string
		own       []any
		wantReady string
	}
	for _, topo := range []struct {
		name    string
		cluster bool
		rows    []row
	}{
		{"standalone", false, []row{{"full", []any{"+ping"}, "ok"}, {"noping", nil, "'ping'"}}},
		{"cluster", true, []row{
			{"full", []any{"+ping", "+cluster|slots"}, "ok"},
			{"noping", []any{"+cluster|slots"}, "'ping'"},
			{"noslots", []any{"+ping"}, "'cluster|slots'"},
		}},
	} {
		t.Run(topo.name, func(t *testing.T) {
			var addrs []string
			if topo.cluster {
				addrs = redistest.Cluster(t).Addrs()
			} else {
				addrs = []string{redistest.Standalone(t).Addr}
			}
			for _, tc := range topo.rows {
				c, base, stop := runAsUser(t, sidecar.Config{Cluster: topo.cluster, Upstreams: addrs[:1]}, addrs,
					append(append([]any{}, app...), tc.own...), tc.user)
				_, body := get(t, base+"/readyz")
				t.Logf("%s: /readyz: %s", tc.user, strings.TrimSpace(body))
				if !strings.Contains(body, tc.wantReady) {
					t.Errorf("%s: /readyz says %q, want %q", tc.user, body, tc.wantReady)
				}
				if tc.wantReady == "ok" {
					for i := range 30 { // keys on every master of a cluster
						k := fmt.Sprintf("app:%s:%d", tc.user, i)
						if err := c.Set(ctx, k, tc.user, 0).Err(); err != nil {
							t.Errorf("%s: SET through the sidecar: %v", tc.user, err)
						}
						if got, err := c.Get(ctx, k).Result(); err != nil || got != tc.user {
							t.Errorf("%s: GET through the sidecar: %q, %v", tc.user, got, err)
						}
					}
				}
				stop()
			}
		})
	}
}

// runAsUser sets user (password "pw") with rules on every Redis of
// addrs, runs the whole sidecar with cfg and that user's credentials in
// files (as the injector mounts them) until it serves (before, /readyz
// says only "not serving"), and returns a client of it, its HTTP base URL
// and what stops it.
func runAsUser(t *testing.T, cfg sidecar.Config, addrs []string, rules []any, user string) (*redis.Client, string, func()) {
	t.Helper()
	ctx := context.Background()
	for _, a := range addrs {
		direct := redis.NewClient(&redis.Options{Addr: a})
		err := direct.Do(ctx, append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw"}, rules...)...).Err()
		direct.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cfg.UsernameFile, cfg.PasswordFile = filepath.Join(dir, "username"), filepath.Join(dir, "password")
	testpki.WriteFile(t, cfg.UsernameFile, []byte(user))
	testpki.WriteFile(t, cfg.PasswordFile, []byte("pw"))
	ln, hl := listen(t), listen(t)
	cfg.Listener, cfg.HTTPListener = ln, hl
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sidecar.Run(runCtx, cfg) }()
	base := "http://" + hl.Addr().String()
	eventually.True(t, 10*time.Second, user+": the sidecar serves", func() bool {
		_, body := get(t, base+"/readyz")
		return !strings.Contains(body, "not serving")
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
	return c, base, func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestSidecarSentinelCredentialsFromFiles runs the sidecar with a Sentinel
// target and both sets of credentials in files only (as the injector
// mounts them), against real Sentinels with a password of their own and a
// master with requirepass: it finds the master and serves. The follower's
// first ROLE check of the master needs the Redis password, so the files
// must be read before the Sentinels are asked. (The rotation and the
// failovers: test/injected.)
func TestSidecarSentinelCredentialsFromFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and redis-sentinel; skipped with -short")
	}
	h := redistest.Sentinel(t, redisproc.SentinelOptions{Replicas: 1, Sentinels: 1, Password: "data-pw", SentinelPassword: "sentinel-pw"})
	dir := t.TempDir()
	passFile, sentinelPassFile := filepath.Join(dir, "password"), filepath.Join(dir, "sentinel-password")
	testpki.WriteFile(t, passFile, []byte("data-pw"))
	testpki.WriteFile(t, sentinelPassFile, []byte("sentinel-pw"))
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{
			Listener: ln, Sentinels: h.SentinelAddrs(), SentinelMaster: h.Opts.MasterName,
			PasswordFile: passFile, SentinelPasswordFile: sentinelPassFile, StartupWait: -1,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer c.Close()
	start := time.Now()
	eventually.Succeeds(t, 20*time.Second, func() error { return c.Set(context.Background(), "k", "v", 0).Err() })
	t.Logf("first SET through the sidecar acknowledged %v after Run", time.Since(start).Round(time.Millisecond))
}
