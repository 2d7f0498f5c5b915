package redistest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// busyScript keeps Redis' main thread busy ARGV[1] microseconds; Redis
// serves every waiting client between two runs, so each of their commands
// waits for the rest of the script running when it arrived: over 0 to
// ARGV[1], half of it on average.
const busyScript = `local s = redis.call('TIME') local t0 = s[1] * 1e6 + s[2]
repeat local n = redis.call('TIME') until n[1] * 1e6 + n[2] - t0 >= tonumber(ARGV[1]) return 1`

// KeepBusy runs busyScript for hold at a time, back to back, on the Redis
// at addr, from a client of its own, until the returned stop is called
// (also at tb's cleanup) or for at most limit. stop waits for the script
// running to end. Behind scripts of 20 ms a client's waits were p50 21 ms
// (98 % over the 10 ms high mark of a shed limiter, engine shedSlow; a
// command may wait for two scripts), behind 5 ms ones p50 6.8 ms.
func KeepBusy(tb testing.TB, addr string, hold, limit time.Duration) (stop func()) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	done, quit := make(chan struct{}), make(chan struct{})
	stop = sync.OnceFunc(func() { close(quit); <-done; c.Close() })
	tb.Cleanup(stop)
	go func() {
		defer close(done)
		for end := time.Now().Add(limit); time.Now().Before(end); {
			select {
			case <-quit:
				return
			default:
			}
			if err := c.Eval(context.Background(), busyScript, nil, hold.Microseconds()).Err(); err != nil {
				tb.Errorf("EVAL of the busy script: %v", err)
				return
			}
		}
	}()
	return stop
}

// ShedFollowsBusy checks a shed key's limiter against the real Redis at
// addr while writers far over the key's share run, rate being the key's
// admitted writes per second over a window (the server's count): the
// whole share (budget) while the shard answers at once; while scripts of
// hold keep it busy, a small part of it (at most 0.35 × budget) within
// 8 s, which then holds for 3 s, every half second (the limiter settles,
// it does not halve and double in turn); once the shard is fast again the
// share again within 8 s. The windows are half a second and polled: the
// limiter times each reply from the test's process, so a loaded machine
// that stalls it makes it back off as from a queueing shard, and the
// scripts themselves may pause. It returns the rates it saw while busy.
func ShedFollowsBusy(t *testing.T, addr string, hold time.Duration, budget float64, rate func(time.Duration) float64) []float64 {
	t.Helper()
	const window = 500 * time.Millisecond
	var fast float64
	eventually.True(t, 8*time.Second, "the share admitted while the shard answers at once", func() bool {
		fast = rate(window)
		return fast >= 0.7*budget && fast <= 1.3*budget
	})
	stopBusy := KeepBusy(t, addr, hold, 20*time.Second)
	var busy []float64
	eventually.True(t, 8*time.Second, "a small part of the share admitted while the shard queues", func() bool {
		busy = append(busy, rate(window))
		return busy[len(busy)-1] <= 0.35*budget
	})
	for range 6 {
		busy = append(busy, rate(window))
		if r := busy[len(busy)-1]; r > 0.35*budget {
			t.Errorf("admitted %.0f/s in a window once settled while the shard queued, want at most %.0f/s (all windows while busy: %.0f)", r, 0.35*budget, busy)
			break
		}
	}
	stopBusy()
	var back float64
	eventually.True(t, 8*time.Second, "the share back once the shard is fast again", func() bool {
		back = rate(window)
		return back >= 0.7*budget
	})
	t.Logf("admitted per second: %.0f while the shard answered at once, %.0f while it queued (half-second windows), %.0f once fast again (share %.0f/s)", fast, busy, back, budget)
	return busy
}
