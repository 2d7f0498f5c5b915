package proxy_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/upstream"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
)

// TestSetMasterMovesEveryConnection moves a proxy that follows a master
// (Config.Master) from one
// Redis to another, with the event loop (plaintext and TLS) and with
// sessions only: the
// clients stay connected to the proxy and their next commands reach the
// new master; a client blocked on the old one and a client with a
// connection of its own get an error (the latter's SELECT is then
// replayed on the new master), never a reply from the old master. A fence refuses
// every command until Switch, on the same master or another.
func TestSetMasterMovesEveryConnection(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name        string
		noLoop, tls bool
	}{{"event loop", false, false}, {"sessions", true, false}, {"event loop over TLS", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// upA and upB are what the proxy dials (TLS ports, with client
			// certificates, over TLS); a and b serve the checks, in
			// plaintext.
			var a, b *redisproc.Server
			var upA, upB string
			cfg := proxy.Config{NoEventLoop: tc.noLoop}
			if tc.tls {
				dir := t.TempDir()
				serverCA, clientCA := testpki.NewCA(t, dir, "server-ca"), testpki.NewCA(t, dir, "client-ca")
				dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
				for _, d := range []string{dirA, dirB} {
					if err := os.Mkdir(d, 0o700); err != nil {
						t.Fatal(err)
					}
				}
				upA, a = testpki.MTLSRedis(t, dirA, serverCA, clientCA)
				upB, b = testpki.MTLSRedis(t, dirB, serverCA, clientCA)
				cfg.TLS = clientTLS(t, dir, serverCA, clientCA)
			} else {
				a, b = redistest.Standalone(t), redistest.Standalone(t)
				upA, upB = a.Addr, b.Addr
			}
			master := upstream.NewMaster(upA)
			cfg.Master = master
			addr, _ := start(t, cfg)
			ctx := context.Background()
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
			defer c.Close()
			direct := func(s string) *redis.Client { return redis.NewClient(&redis.Options{Addr: s}) }
			da, db := direct(a.Addr), direct(b.Addr)
			defer da.Close()
			defer db.Close()
			if err := c.Set(ctx, "k", "on-a", 0).Err(); err != nil {
				t.Fatal(err)
			}

			// A client with connection state (SELECT 1) and one blocked in
			// BLPOP, both on the old master.
			stateful, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer stateful.Close()
			sr := bufio.NewReader(stateful)
			roundTrip := func(cmd string) (string, error) {
				stateful.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := stateful.Write([]byte(cmd + "\r\n")); err != nil {
					return "", err
				}
				return sr.ReadString('\n')
			}
			if r, err := roundTrip("SELECT 1"); err != nil || r != "+OK\r\n" {
				t.Fatalf("SELECT 1: %q %v", r, err)
			}
			if r, err := roundTrip("SET s 1"); err != nil || r != "+OK\r\n" {
				t.Fatalf("SET s 1: %q %v", r, err)
			}
			blocked := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, ReadTimeout: -1})
			defer blocked.Close()
			popped := make(chan error, 1)
			go func() { popped <- blocked.BLPop(ctx, 0, "q").Err() }()
			eventually.True(t, 5*time.Second, "BLPOP blocks on the old master", func() bool {
				n, _ := da.Info(ctx, "clients").Result()
				return strings.Contains(n, "blocked_clients:1")
			})

			if changed, _, _ := master.Switch(upB); !changed {
				t.Fatal("Switch to another master: not changed")
			}
			select {
			case err := <-popped:
				if err == nil || redis.HasErrorPrefix(err, "WRONGTYPE") {
					t.Errorf("BLPOP across the switch: %v, want the proxy's error", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("BLPOP still blocked on the old master after the switch")
			}
			// The stateful client's connection to the old master is gone:
			// its next command gets an error, never the old master's
			// reply; then its SELECT is replayed on the new master.
			if r, err := roundTrip("GET s"); err == nil && !strings.HasPrefix(r, "-") {
				t.Errorf("stateful client after the switch: %q, want an error", r)
			}
			if r, err := roundTrip("SET s 2"); err != nil || r != "+OK\r\n" {
				t.Fatalf("SET s 2 after the switch: %q %v", r, err)
			}
			db1 := redis.NewClient(&redis.Options{Addr: b.Addr, DB: 1})
			defer db1.Close()
			if v := db1.Get(ctx, "s").Val(); v != "2" {
				t.Errorf("new master's db 1 holds s = %q, want 2 (SELECT 1 replayed)", v)
			}
			// A stateless client goes on, on the new master.
			if err := c.Set(ctx, "k", "on-b", 0).Err(); err != nil {
				t.Fatalf("SET after the switch: %v", err)
			}
			if v := db.Get(ctx, "k").Val(); v != "on-b" {
				t.Errorf("new master holds k = %q, want on-b", v)
			}
			if v := da.Get(ctx, "k").Val(); v != "on-a" {
				t.Errorf("old master holds k = %q, want on-a (untouched)", v)
			}

			// The fence: every command refused, then served again once the
			// master is confirmed.
			master.Fence()
			if err := c.Get(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "failing over") {
				t.Errorf("GET while fenced: %v, want a failing-over error", err)
			}
			if changed, unfenced, _ := master.Switch(upB); changed || !unfenced {
				t.Fatalf("Switch to the same master: changed %v, unfenced %v", changed, unfenced)
			}
			if v, err := c.Get(ctx, "k").Result(); err != nil || v != "on-b" {
				t.Errorf("GET after the fence: %q %v", v, err)
			}
		})
	}
}
