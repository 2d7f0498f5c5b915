package routing_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

var spreadKeys = []string{"likes:post:42", "{user:1}:likes", "{user:1}:views", "product:iphone_17", "{}weird", "a"}

// physicalSets lists, per key, the physical key sets the engine uses.
func physicalSets(key string, n int) map[string][]string {
	return map[string][]string{
		"replicas":       routing.ReplicaKeys(key, n),
		"shards gen 0":   routing.ShardKeys(key, routing.Generation{FromEpoch: 0, Shards: int32(n)}),
		"shards gen 977": routing.ShardKeys(key, routing.Generation{FromEpoch: 977, Shards: int32(n)}),
	}
}

// redisCliRanges are the slot ranges `redis-cli --cluster create` gives
// three masters.
var redisCliRanges = [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

func master(slot uint16) int {
	for i, r := range redisCliRanges {
		if int(slot) >= r[0] && int(slot) <= r[1] {
			return i
		}
	}
	return -1
}

func TestPhysicalKeysDistinctSlotsEvenlySpaced(t *testing.T) {
	for _, key := range spreadKeys {
		for n := 2; n <= 64; n++ {
			for set, keys := range physicalSets(key, n) {
				slots := map[uint16]bool{}
				for i, k := range keys {
					if !strings.HasSuffix(k, ":"+key) {
						t.Fatalf("%s: physical key %q does not end with the logical key", set, k)
					}
					s := routing.Slot(k)
					if slots[s] {
						t.Fatalf("%q %s n=%d: two physical keys on slot %d", key, set, n, s)
					}
					slots[s] = true
					// Key i sits i/n of the ring after key 0.
					want := (int(routing.Slot(keys[0])) + i*routing.SlotCount/n) % routing.SlotCount
					if int(s) != want {
						t.Fatalf("%q %s n=%d: key %d on slot %d, want %d", key, set, n, i, s, want)
					}
				}
			}
		}
	}
}

func TestPhysicalKeysCoverEveryMaster(t *testing.T) {
	// With 4 or more keys the spacing (at most 4096 slots) is shorter than
	// any master's range, so every master gets one. With 3 the spacing
	// equals the ranges and a start within a slot of a range boundary can
	// miss one master; measure how rare that is.
	misses, total := 0, 0
	for i := 0; i < 20000; i++ {
		key := fmt.Sprintf("key:%d", i)
		for n := 3; n <= 8; n++ {
			seen := map[int]bool{}
			for _, k := range routing.ReplicaKeys(key, n) {
				seen[master(routing.Slot(k))] = true
			}
			if len(seen) < 3 {
				if n > 3 {
					t.Fatalf("%q n=%d: only %d masters", key, n, len(seen))
				}
				misses++
			}
			if n == 3 {
				total++
			}
		}
	}
	if misses*1000 > total {
		t.Fatalf("n=3 missed a master for %d of %d keys", misses, total)
	}
	t.Logf("n=3 missed a master for %d of %d keys", misses, total)
}

// TestPhysicalKeysOnRealCluster checks the slots against a real Redis
// Cluster's CLUSTER KEYSLOT and that the keys land on every master.
func TestPhysicalKeysOnRealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	c := redistest.Cluster(t)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	for _, key := range spreadKeys {
		for _, n := range []int{3, 4, 8} {
			for set, keys := range physicalSets(key, n) {
				t.Run(fmt.Sprintf("%s/%d/%s", key, n, set), func(t *testing.T) {
					if err := cc.FlushAll(ctx).Err(); err != nil {
						t.Fatal(err)
					}
					for _, k := range keys {
						got, err := cc.ClusterKeySlot(ctx, k).Result()
						if err != nil {
							t.Fatal(err)
						}
						if got != int64(routing.Slot(k)) {
							t.Fatalf("CLUSTER KEYSLOT %q = %d, routing.Slot = %d", k, got, routing.Slot(k))
						}
						if err := cc.Set(ctx, k, 1, 0).Err(); err != nil {
							t.Fatal(err)
						}
					}
					var mu sync.Mutex
					var perMaster []int64
					err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
						n, err := m.DBSize(ctx).Result()
						mu.Lock()
						perMaster = append(perMaster, n)
						mu.Unlock()
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					for _, n := range perMaster {
						if n == 0 {
							t.Fatalf("keys per master %v: a master holds none", perMaster)
						}
					}
				})
			}
		}
	}
}
