package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/routing"
)

// DefaultRedisTimeout bounds all the Redis work of one reconcile pass (folds
// and fills together), so that a stalled Redis costs one worker at most this
// long per pass instead of every op's timeouts times go-redis's retries.
const DefaultRedisTimeout = 5 * time.Second

// actResult says what happened in Redis.
type actResult struct {
	// reason and message are set when part of the work failed; the pass
	// stopped there.
	reason, message string
	// retryAt is set when work remains (folds pending or failed, fills
	// failed): retry after the margin.
	retryAt time.Time
	filled  int
}

// redisPass is the Redis side of one reconcile pass: one client, opened on
// first use, and a stop at the first failure. A Redis that refuses or
// stalls fails every following op the same way, so going on would only
// multiply the wait; the rest is retried after the margin.
type redisPass struct {
	r      *HotKeyPolicyReconciler
	policy *v1alpha1.HotKeyPolicy
	now    time.Time
	cl     redis.UniversalClient
	res    actResult
}

func (r *HotKeyPolicyReconciler) newRedisPass(policy *v1alpha1.HotKeyPolicy, now time.Time) *redisPass {
	return &redisPass{r: r, policy: policy, now: now}
}

// redisContext bounds the Redis work of one pass (see DefaultRedisTimeout).
func (r *HotKeyPolicyReconciler) redisContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := r.RedisTimeout
	if d <= 0 {
		d = DefaultRedisTimeout
	}
	return context.WithTimeout(ctx, d)
}

// stopped reports whether an earlier step failed.
func (p *redisPass) stopped() bool { return p.res.reason != "" }

func (p *redisPass) fail(reason string, err error) {
	p.res.reason, p.res.message = reason, err.Error()
	p.res.retryAt = p.now.Add(p.r.Margin)
}

// client opens the policy's client on first use; nil once the pass stopped.
func (p *redisPass) client(ctx context.Context) redis.UniversalClient {
	if p.stopped() {
		return nil
	}
	if p.cl != nil {
		return p.cl
	}
	creds, err := p.r.credentials(ctx, p.policy)
	if err != nil {
		reason := v1alpha1.ReasonRedisUnavailable
		if errors.Is(err, errCredentials) {
			reason = v1alpha1.ReasonCredentialsMissing
		}
		p.fail(reason, err)
		return nil
	}
	var cl redis.UniversalClient
	p.r.mem.with(client.ObjectKeyFromObject(p.policy), func(m *policyMemory) {
		cl, err = m.client(p.r.Redis, p.policy.Spec.Target, creds)
	})
	if err != nil {
		p.fail(v1alpha1.ReasonRedisUnavailable, err)
		return nil
	}
	p.cl = cl
	return cl
}

// redisFailed records the first failed Redis op and stops the pass.
func (p *redisPass) redisFailed(ctx context.Context, err error) {
	log.FromContext(ctx).Error(err, "redis work failed; the rest of this pass is skipped")
	p.fail(v1alpha1.ReasonRedisUnavailable, fmt.Errorf("Redis work stopped at the first failure: %w", err))
}

// fold folds retired generations, removing the folded ones from
// out.Entries. It runs before publication: a generation leaves the table
// only once folded. out is what is enforced (see enforced).
func (p *redisPass) fold(ctx context.Context, spec *v1alpha1.HotKeyPolicySpec, out *decide.Output) {
	if len(out.Folds) == 0 {
		return
	}
	cl := p.client(ctx)
	if cl == nil {
		return
	}
	m := p.r.Metrics
	done := make(map[decide.GenRef]bool)
	gens := make(map[decide.GenRef]routing.Generation)
	folder := fold.New(cl, fold.Options{})
	for _, ref := range out.Folds {
		g, ok := decide.Generation(out.Entries, ref)
		if !ok {
			continue
		}
		fr, err := folder.Split(ctx, ref.Key, (&routing.Table{Entries: out.Entries}).Lookup(ref.Key).Split, g)
		m.foldMoves.Add(float64(fr.Moves))
		if err != nil {
			m.folds.WithLabelValues("error").Inc()
			p.redisFailed(ctx, err)
			break
		}
		if fr.Done {
			m.folds.WithLabelValues("done").Inc()
			done[ref] = true
			gens[ref] = g
		} else {
			m.folds.WithLabelValues("pending").Inc()
			p.res.retryAt = p.now.Add(p.r.Margin)
		}
	}
	out.Entries = decide.Prune(p.now, spec.Mitigations.Split.Epoch.Milliseconds(), out.Entries, done)
	// The pruned generations' shards and ack keys expire after
	// fold.RetiredTTL, so Redis does not grow with every generation. Prune
	// may keep a folded generation a little longer (epoch bookkeeping); only
	// those that left the entries are retired.
	for ref, g := range gens {
		if p.stopped() {
			return
		}
		if _, still := decide.Generation(out.Entries, ref); still {
			continue
		}
		if err := folder.Retire(ctx, ref.Key, g, fold.RetiredTTL); err != nil {
			p.redisFailed(ctx, err)
		}
	}
}

// fill copies base values into replicas. It runs after publication: the
// routing entries do not wait for it (readers fall back to the base key on a
// replica miss), and the refill a margin later catches the writes that went
// through the previous table to the base key only.
func (p *redisPass) fill(ctx context.Context, fills []decide.Fill) {
	if len(fills) == 0 {
		return
	}
	cl := p.client(ctx)
	if cl == nil {
		return
	}
	book := func(f decide.Fill, at time.Time) {
		p.r.mem.with(client.ObjectKeyFromObject(p.policy), func(m *policyMemory) { m.refills.filled(f, at) })
	}
	for i, f := range fills {
		if err := fillReplicas(ctx, cl, f); err != nil {
			p.redisFailed(ctx, err)
			// The table already replicates these keys, so the next pass
			// would not see them as new: keep them as refills to retry.
			for _, rest := range fills[i:] {
				rest.Refill = false
				book(rest, p.res.retryAt)
			}
			return
		}
		p.res.filled++
		book(f, p.now.Add(p.r.Margin))
	}
}

// actInRedis folds the retired generations of out (see redisPass.fold)
// under the pass deadline. The deletion drain uses it; it has no replicas.
func (r *HotKeyPolicyReconciler) actInRedis(ctx context.Context, policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, out *decide.Output, now time.Time) actResult {
	ctx, cancel := r.redisContext(ctx)
	defer cancel()
	p := r.newRedisPass(policy, now)
	p.fold(ctx, spec, out)
	return p.res
}

// fills lists the replica fills of this pass (see decide.Fills) and
// forgets the booked refills of keys no longer replicated alike.
func (r *HotKeyPolicyReconciler) fills(key types.NamespacedName, prev *published, out *decide.Output, scheduled []decide.ScheduledKey, now time.Time) []decide.Fill {
	var due map[string]int
	r.mem.with(key, func(m *policyMemory) {
		due = m.refills.due(now)
		m.refills.drop(out.Entries)
	})
	return decide.Fills(now, r.Margin, prev.Table, out.Entries, scheduled, due)
}

// fillReplicas copies the base value into every replica with the replica
// TTL. A missing base key leaves the replicas alone (readers fall back to
// the base key); a non-string value is skipped, not an error of the policy.
func fillReplicas(ctx context.Context, cl redis.UniversalClient, f decide.Fill) error {
	v, err := cl.Get(ctx, f.Key).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "WRONGTYPE") {
			return nil
		}
		return fmt.Errorf("pre-warm: read base key: %w", err)
	}
	_, err = cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range routing.ReplicaKeys(f.Key, f.Replicas) {
			p.Set(ctx, k, v, f.TTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pre-warm: write replicas: %w", err)
	}
	return nil
}
