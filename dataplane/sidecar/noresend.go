package sidecar

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
)

// The engine's cluster client must never send a command twice: a split
// counter's INCRBY that Redis applied before its connection was lost (a
// failover's fence closes connections, a node dies after the write) would
// be counted twice if sent again. MaxRetries: -1 stops the node clients'
// own retries, but go-redis' ClusterClient retries a command whose
// connection failed on its own, up to MaxRedirects times, whatever
// MaxRetries says; MaxRedirects cannot be lowered without losing MOVED
// and ASK. So each node client gets noResend, which turns an error that
// may have come after the command was written into one go-redis does not
// retry (sentError); a failed dial (nothing was sent) and a connection
// pool exhausted are left as they are, and are retried.

// A pipeline is read by the cluster client itself, below the node
// clients' hooks, so noResendPipelines marks every command of it
// NoRetry, which go-redis honours for a whole batch.

// sendOnce sets the retries of the engine's client: none of a command,
// one dial. No retries: go-redis retries any command whose connection
// failed, and an INCRBY applied before its connection closed (a failover's
// fence closes them) would then be counted twice; failed commands get an
// error, as on the proxy's raw path (a cluster client also needs
// noResendOnNodes). One dial per connection, not go-redis' five 100 ms
// apart, none to a node whose dial just failed (ejecting), and no backoff
// between the cluster client's own attempts at a failed dial
// (MinRetryBackoff -1; they went 8-64 ms apart, about 100 ms per command,
// all to the same master while the slot map names it): a command to a
// node that is down fails at once, so its failures are counted at the
// rate clients send them and the manager withdraws a move whose path
// fails within a report interval of the evidence (docs/engine.md, "A
// move whose path fails is undone"; test/clients
// TestFailingSplitPathRolledBack), and a split counter's increments bound
// for it go to another place at once (placeAfterFailure) rather than after
// the backoffs.
func sendOnce(uo *redis.UniversalOptions) {
	uo.MaxRetries = -1
	uo.DialerRetries = 1
	uo.MinRetryBackoff = -1
}

// noResendOnNodes installs noResend on every node client of cc, and
// noResendPipelines on cc.
func noResendOnNodes(cc *redis.ClusterClient) {
	cc.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(noResend{}) })
	cc.AddHook(noResendPipelines{})
}

// noResendPipelines is the cluster client's hook: it sends each pipeline
// as commands marked NoRetry (noRetryCmd), whose replies land in the
// caller's commands.
type noResendPipelines struct{}

func (noResendPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (noResendPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (noResendPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		marked := make([]redis.Cmder, len(cmds))
		for i, c := range cmds {
			marked[i] = noRetryCmd{c}
		}
		return next(ctx, marked)
	}
}

// noRetryCmd is a command go-redis must not send again: everything else
// is the command's own.
type noRetryCmd struct{ redis.Cmder }

func (noRetryCmd) NoRetry() bool { return true }

// noResend is the node clients' hook: see the comment above.
type noResend struct{}

func (noResend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (noResend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if mayHaveBeenSent(err) {
			err = &sentError{err}
			cmd.SetErr(err)
		}
		return err
	}
}

func (noResend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if e := c.Err(); mayHaveBeenSent(e) {
				c.SetErr(&sentError{e})
			}
		}
		if mayHaveBeenSent(err) {
			err = &sentError{err}
		}
		return err
	}
}

// mayHaveBeenSent reports whether err is a failure of the connection that
// may have come after the command reached Redis: not Redis' answer, not a
// dial that failed, not a pool exhausted, not the caller's context.
func mayHaveBeenSent(err error) bool {
	var rerr redis.Error
	var sent *sentError
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.As(err, &rerr), errors.As(err, &sent):
		return false
	case engine.NotSent(err), errors.Is(err, redis.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

// sentError is a connection failure after the command may have been
// written: go-redis does not retry it, because it neither is nor wraps an
// error it retries (it has no Unwrap). Its text starts in lower case, so
// the engine counts it as a failure of the path (engine.Failure).
type sentError struct{ err error }

func (e *sentError) Error() string {
	return "heatsink: the connection failed after the command may have reached Redis (not sent again): " + e.err.Error()
}
