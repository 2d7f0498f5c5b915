// Package eventually is the one way heatsink's tests (and test harnesses)
// wait for a condition: poll it, never sleep for a guessed duration. A
// condition that returns an error says why it does not hold yet, so a timeout
// reports the last reason instead of a bare "timed out".
package eventually

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Interval is how often a condition is polled. Short enough to add little to
// a test's duration, long enough not to busy-wait.
const Interval = 10 * time.Millisecond

// Poll calls cond every Interval until it returns nil (Poll returns nil),
// returns an error made by Permanent (Poll returns that error at once),
// timeout passes or ctx ends (Poll returns cond's last error, wrapped).
func Poll(ctx context.Context, timeout time.Duration, cond func() error) error {
	return PollEvery(ctx, Interval, timeout, cond)
}

// PollEvery is Poll with another interval, for a condition that is costly
// to check (a request to a loaded API server, a process to run).
func PollEvery(ctx context.Context, interval, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %v: %w", timeout, err)
		case <-tick.C:
		}
	}
}

// Permanent marks err as final: the condition can never hold (say, the
// process it waits for has exited), so Poll stops waiting and returns err.
func Permanent(err error) error { return permanent{err} }

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Succeeds fails t (fatally) unless cond returns nil within timeout.
func Succeeds(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(context.Background(), timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// True fails t (fatally) unless cond holds within timeout; what names the
// condition in the failure.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Succeeds(t, timeout, func() error {
		if cond() {
			return nil
		}
		return errors.New(what)
	})
}
