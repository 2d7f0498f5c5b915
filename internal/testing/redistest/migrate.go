package redistest

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// MigrateSlot moves slot, and its keys, from the master that holds them to
// the next master of addrs, the way redis-cli --cluster reshard does: the
// slot is marked IMPORTING and MIGRATING, its keys move one MIGRATE at a
// time (so a client may meet the slot half moved, ASK, and then moved,
// MOVED), and every master is told the new owner.
func MigrateSlot(tb testing.TB, addrs []string, slot int) {
	tb.Helper()
	ctx := context.Background()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("migrating slot %d: %v", slot, err)
		}
	}
	clients := make([]*redis.Client, len(addrs))
	ids := make([]string, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a})
		defer clients[i].Close()
		id, err := clients[i].Do(ctx, "CLUSTER", "MYID").Text()
		must(err)
		ids[i] = id
	}
	src := -1
	for i, c := range clients {
		if n, err := c.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int(); err == nil && n > 0 {
			src = i
		}
	}
	if src < 0 {
		tb.Fatalf("migrating slot %d: no node holds its keys", slot)
	}
	dst := (src + 1) % len(addrs)
	must(clients[dst].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src]).Err())
	must(clients[src].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst]).Err())
	host, port, _ := strings.Cut(addrs[dst], ":")
	for {
		keys, err := clients[src].Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 1).StringSlice()
		must(err)
		if len(keys) == 0 {
			break
		}
		must(clients[src].Do(ctx, "MIGRATE", host, port, keys[0], 0, 5000).Err())
	}
	for _, c := range clients {
		must(c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst]).Err())
	}
}
