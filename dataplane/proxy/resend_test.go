package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestMovedLargeValueNotReplayed: in front of a 3-master cluster, a
// go-redis pipeline (default configuration, retries included) whose first
// command is a large SET (streamed) to a slot that moved after the sidecar
// loaded its slot map gets RESEND for it, and the pipeline's other command
// is applied once: with TRYAGAIN, go-redis sent the whole pipeline again.
func TestMovedLargeValueNotReplayed(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := context.Background()
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer direct.Close()
	for _, noLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("sessions-only=%v", noLoop), func(t *testing.T) {
			big, other := fmt.Sprintf("resend:big:%v", noLoop), fmt.Sprintf("resend:other:%v", noLoop)
			if routing.Slot(big)*3/16384 == routing.Slot(other)*3/16384 {
				t.Fatal("the keys share a master; pick others")
			}
			must(t, direct.Set(ctx, big, "small", 0).Err())
			must(t, direct.Del(ctx, other).Err())
			addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs(), Cluster: true, NoEventLoop: noLoop})
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			// The sidecar holds its slot map: the big key's slot moves now.
			must(t, c.Ping(ctx).Err())
			redistest.MigrateSlot(t, cl.Addrs(), int(routing.Slot(big)))
			cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, big, valueBytes(2<<20, 7), 0)
				p.Incr(ctx, other)
				return nil
			})
			if err := cmds[0].Err(); err == nil || !strings.HasPrefix(err.Error(), "RESEND ") {
				t.Errorf("large SET to a moved slot: %v, want RESEND", err)
			}
			if err := cmds[1].Err(); err != nil {
				t.Errorf("INCR after it: %v", err)
			}
			if v, _ := direct.Get(ctx, other).Int(); v != 1 {
				t.Errorf("%s = %d after one acknowledged INCR: the pipeline was sent again", other, v)
			}
			if v, _ := direct.Get(ctx, big).Result(); v != "small" {
				t.Errorf("%s holds %d bytes, want the value before the refused SET", big, len(v))
			}
		})
	}
}
