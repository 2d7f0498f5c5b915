package redistest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// busyScript keeps Redis' main thread busy 40 ms; Redis serves every
// waiting client between two runs, so each of their commands waits, about
// 20 ms on average: well over the 10 ms at which a shed limiter takes a
// reply as queued (engine shedSlow). With 20 ms scripts half the waits
// were under it, and the limiter's halving and doubling took 3 to over
// 11 s to settle.
const busyScript = `local s = redis.call('TIME') local t0 = s[1] * 1e6 + s[2]
repeat local n = redis.call('TIME') until n[1] * 1e6 + n[2] - t0 >= 40000 return 1`

// KeepBusy runs busyScript back to back on the Redis at addr, from a client
// of its own, until the returned stop is called (also at tb's cleanup) or
// for at most limit. stop waits for the script running to end.
func KeepBusy(tb testing.TB, addr string, limit time.Duration) (stop func()) {
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
			if err := c.Eval(context.Background(), busyScript, nil).Err(); err != nil {
				tb.Errorf("EVAL of the busy script: %v", err)
				return
			}
		}
	}()
	return stop
}
