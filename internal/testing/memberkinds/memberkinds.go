// Package memberkinds is the kinds of member split (a hash by field, a
// sorted set and a set by member) as tests drive them through real
// clients: a write of member i and the whole collection read back in a
// canonical order, so that a split key's replies can be compared with a
// plain key's.
package memberkinds

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Kind is one kind of member split.
type Kind struct {
	Kind routing.MemberKind
	Type string // Redis' TYPE name
	// Write writes member i of key (HINCRBY, ZINCRBY, SADD).
	Write func(ctx context.Context, c redis.UniversalClient, key string, i int) redis.Cmder
	// Whole reads the whole collection, printed in a canonical order.
	Whole func(ctx context.Context, c redis.UniversalClient, key string) string
	// Remove removes member i of key (HDEL, ZREM, SREM).
	Remove func(ctx context.Context, c redis.UniversalClient, key string, i int) *redis.IntCmd
}

// All is every kind of member split.
var All = []Kind{
	{routing.KindHash, "hash",
		func(ctx context.Context, c redis.UniversalClient, key string, i int) redis.Cmder {
			return c.HIncrBy(ctx, key, fmt.Sprintf("f:%d", i), int64(i%3+1))
		},
		func(ctx context.Context, c redis.UniversalClient, key string) string {
			m, err := c.HGetAll(ctx, key).Result()
			return fmt.Sprint(m, err) // fmt prints maps sorted
		},
		func(ctx context.Context, c redis.UniversalClient, key string, i int) *redis.IntCmd {
			return c.HDel(ctx, key, fmt.Sprintf("f:%d", i))
		}},
	{routing.KindZSet, "zset",
		func(ctx context.Context, c redis.UniversalClient, key string, i int) redis.Cmder {
			return c.ZIncrBy(ctx, key, float64(i%3+1), fmt.Sprintf("p:%d", i))
		},
		func(ctx context.Context, c redis.UniversalClient, key string) string {
			z, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
			return fmt.Sprint(z, err)
		},
		func(ctx context.Context, c redis.UniversalClient, key string, i int) *redis.IntCmd {
			return c.ZRem(ctx, key, fmt.Sprintf("p:%d", i))
		}},
	{routing.KindSet, "set",
		func(ctx context.Context, c redis.UniversalClient, key string, i int) redis.Cmder {
			return c.SAdd(ctx, key, fmt.Sprintf("m:%d", i))
		},
		func(ctx context.Context, c redis.UniversalClient, key string) string {
			m, err := c.SMembers(ctx, key).Result()
			slices.Sort(m)
			return fmt.Sprint(m, err)
		},
		func(ctx context.Context, c redis.UniversalClient, key string, i int) *redis.IntCmd {
			return c.SRem(ctx, key, fmt.Sprintf("m:%d", i))
		}},
}
