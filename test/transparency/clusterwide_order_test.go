package transparency

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestWriteAfterClusterWideCommand: through a cluster-mode proxy a client
// sends FLUSHALL and, without waiting for its answer, another client SETs
// a key. One Redis has read the FLUSHALL first, so the key survives; the
// proxy sends FLUSHALL to every master on the flushing client's session,
// and the loop (or the other client's session) wrote the SET first: 198
// of 200 keys wiped through the loop, 187 with sessions only. Now such a
// command is fenced from the moment it is read until every master has
// answered (loop_presend_linux.go fenceUnpresented, session.go
// fenceClusterWide): none is wiped, but for an ordering bound reached.
func TestWriteAfterClusterWideCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	c := redistest.Cluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cc.Close() })
	ctx := context.Background()
	for _, noLoop := range []bool{false, true} {
		name := "proxy-loop"
		if noLoop {
			name = "proxy-sessions"
		}
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			addr := startProxy(t, proxy.Config{Upstreams: c.Addrs()[:1], Cluster: true, NoEventLoop: noLoop, Registerer: reg})
			w := dial(t, addr)
			defer w.conn.Close()
			const tries = 200
			wiped := 0
			for i := range tries {
				f := dial(t, addr)
				send(t, f.conn, "PING")
				if r := readFrame(f.conn, f.r); r != "+PONG\r\n" {
					t.Fatalf("try %d: PING answered %q", i, r)
				}
				k := fmt.Sprintf("cw:%d", i)
				send(t, f.conn, "FLUSHALL")
				send(t, w.conn, "SET", k, "v")
				if r := readFrame(w.conn, w.r); r != "+OK\r\n" {
					t.Fatalf("try %d: SET answered %q", i, r)
				}
				if r := readFrame(f.conn, f.r); r != "+OK\r\n" {
					t.Fatalf("try %d: FLUSHALL answered %q", i, r)
				}
				f.conn.Close()
				// Read from the masters directly, not through the proxy.
				if v, err := cc.Get(ctx, k).Result(); err != nil || v != "v" {
					wiped++
				}
			}
			bounds := orderingBounds(t, reg)
			t.Logf("%s: %d of %d keys SET right after FLUSHALL wiped; ordering bounds reached %d times", name, wiped, tries, bounds)
			if wiped > bounds {
				t.Errorf("%d of %d keys SET right after another client's FLUSHALL were wiped (allowed %d: the ordering bounds reached)", wiped, tries, bounds)
			}
		})
	}
}
