// Package sizes confirms the size of big-key candidates in Redis with
// MEMORY USAGE, at a bounded rate. What the sidecars and node agents see of a
// key is the largest value one access read or wrote; a hash read one field
// at a time, or a list read by ranges, is much larger in Redis than any one
// reply. MEMORY USAGE tells its size in memory, but it is a command on the
// application's Redis: the manager sends at most a few a report interval
// per policy (a token bucket), largest candidate first, and keeps each
// answer for a while (TTL). The decisions (Bucket, Due, Fresh) are pure and
// take the time as an argument; Measure makes the calls.
package sizes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	// DefaultPerInterval is how many keys a policy's candidates may be
	// measured a report interval: the burst of the bucket and its refill.
	DefaultPerInterval = 4
	// DefaultInterval is the bucket's refill period (the manager's
	// default report interval).
	DefaultInterval = 10 * time.Second
	// DefaultTTL is how long an answer stands before the key is measured
	// again: sizes of big keys change slowly, and each measure costs Redis.
	DefaultTTL = 5 * time.Minute
	// DefaultSamples is MEMORY USAGE's SAMPLES: how many elements of an
	// aggregate (hash, set, sorted set, list) Redis looks at to estimate
	// the whole, its cost O(samples). Redis' own default is 5.
	DefaultSamples = 8
)

// Options tune the confirmation; zero fields take the defaults.
type Options struct {
	PerInterval int
	Interval    time.Duration
	TTL         time.Duration
	Samples     int
}

// WithDefaults fills zero fields.
func (o Options) WithDefaults() Options {
	o.PerInterval = cmp.Or(max(o.PerInterval, 0), DefaultPerInterval)
	o.Interval = cmp.Or(max(o.Interval, 0), DefaultInterval)
	o.TTL = cmp.Or(max(o.TTL, 0), DefaultTTL)
	o.Samples = cmp.Or(max(o.Samples, 0), DefaultSamples)
	return o
}

// Bucket is a token bucket of Options.PerInterval tokens refilled at
// PerInterval every Interval: over any span d it grants at most
// PerInterval × (1 + d ÷ Interval). The zero value starts full at its first
// use. Not safe for concurrent use (the reconciler holds its memory lock).
type Bucket struct {
	tokens float64
	at     time.Time
}

func (b *Bucket) refill(now time.Time, o Options) {
	if b.at.IsZero() {
		b.tokens, b.at = float64(o.PerInterval), now
		return
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(o.PerInterval), b.tokens+float64(o.PerInterval)*d.Seconds()/o.Interval.Seconds())
		b.at = now
	}
}

// At is when the bucket was last asked (Take or Next); zero if never.
func (b *Bucket) At() time.Time { return b.at }

// Take grants up to want whole tokens at now and returns how many.
func (b *Bucket) Take(now time.Time, want int, o Options) int {
	b.refill(now, o)
	n := min(want, int(b.tokens))
	if n > 0 {
		b.tokens -= float64(n)
	}
	return max(n, 0)
}

// Next is when n whole tokens are there (now if they are), n at most
// PerInterval.
func (b *Bucket) Next(now time.Time, n int, o Options) time.Time {
	b.refill(now, o)
	want := float64(min(max(n, 1), o.PerInterval))
	if b.tokens >= want {
		return now
	}
	wait := (want - b.tokens) * o.Interval.Seconds() / float64(o.PerInterval)
	return now.Add(time.Duration(math.Ceil(wait * float64(time.Second))))
}

// Result is one key's answer.
type Result struct {
	// Bytes is MEMORY USAGE's answer; 0 when Missing.
	Bytes int64
	// Missing: the key did not exist.
	Missing bool
	At      time.Time
}

// Fresh returns results' answer for key if younger than ttl.
func Fresh(results map[string]Result, key string, now time.Time, ttl time.Duration) (Result, bool) {
	r, ok := results[key]
	if !ok || now.Sub(r.At) >= ttl {
		return Result{}, false
	}
	return r, true
}

// Due lists, in the order given (largest candidate first), the keys with no
// fresh answer, at most n.
func Due(keys []string, results map[string]Result, now time.Time, ttl time.Duration, n int) []string {
	var out []string
	for _, k := range keys {
		if len(out) >= n {
			break
		}
		if _, ok := Fresh(results, k, now, ttl); !ok {
			out = append(out, k)
		}
	}
	return out
}

// Expire drops the answers older than ttl: the map holds at most what the
// bucket granted within ttl.
func Expire(results map[string]Result, now time.Time, ttl time.Duration) {
	for k, r := range results {
		if now.Sub(r.At) >= ttl {
			delete(results, k)
		}
	}
}

// Measure sends MEMORY USAGE key SAMPLES samples for each key, one at a
// time (a cluster client sends each to its key's master), and stops at the
// first error: a refused command (an ACL without +memory|usage) or a
// stalled Redis fails the others alike. It returns the answers got before.
func Measure(ctx context.Context, cl redis.Cmdable, keys []string, samples int, now time.Time) (map[string]Result, error) {
	out := make(map[string]Result, len(keys))
	for _, k := range keys {
		n, err := cl.MemoryUsage(ctx, k, samples).Result()
		switch {
		case errors.Is(err, redis.Nil):
			out[k] = Result{Missing: true, At: now}
		case err != nil:
			return out, fmt.Errorf("MEMORY USAGE: %w", err)
		default:
			out[k] = Result{Bytes: n, At: now}
		}
	}
	return out, nil
}
