package controllers

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
	"github.com/heatsink-dev/heatsink/routing"
)

// Credentials are the Redis ACL user and password of a target.
type Credentials struct {
	Username string
	Password string
	// CA is the PEM bundle of RedisTLS.caSecretRef, if any.
	CA []byte
}

// RedisDialer opens a client to a policy's target. Tests may substitute one;
// production uses DialRedis.
type RedisDialer func(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error)

// DialRedis opens a go-redis client (cluster or standalone) to target. It
// does not connect until first use.
func DialRedis(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
	var tc *tls.Config
	if target.TLS != nil {
		tc = &tls.Config{ServerName: target.TLS.ServerName, MinVersion: tls.VersionTLS12}
		if len(creds.CA) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(creds.CA) {
				return nil, errors.New("redis TLS: ca.crt holds no PEM certificate")
			}
			tc.RootCAs = pool
		}
	}
	// ContextTimeoutEnabled makes every op honour the pass deadline (see
	// DefaultRedisTimeout) on top of the per-op timeouts, retries included.
	const timeout = 2 * time.Second
	if target.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: target.Addresses, Username: creds.Username, Password: creds.Password,
			TLSConfig: tc, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true}), nil
	}
	if len(target.Addresses) == 0 {
		return nil, errors.New("redis target has no address")
	}
	return redis.NewClient(&redis.Options{Addr: target.Addresses[0], Username: creds.Username, Password: creds.Password,
		TLSConfig: tc, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true}), nil
}

// redisClients keeps one client per policy, replaced when the target or the
// credentials change, closed when the policy goes or the manager stops.
type redisClients struct {
	dial RedisDialer
	mu   sync.Mutex
	m    map[types.NamespacedName]redisClient
}

type redisClient struct {
	fingerprint string
	client      redis.UniversalClient
}

func newRedisClients(dial RedisDialer) *redisClients {
	return &redisClients{dial: dial, m: make(map[types.NamespacedName]redisClient)}
}

func (c *redisClients) get(key types.NamespacedName, target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%q %v %v %q %q %q", target.Addresses, target.Cluster, target.TLS, creds.Username, creds.Password, creds.CA)
	fp := hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc, ok := c.m[key]; ok {
		if rc.fingerprint == fp {
			return rc.client, nil
		}
		_ = rc.client.Close()
		delete(c.m, key)
	}
	cl, err := c.dial(target, creds)
	if err != nil {
		return nil, err
	}
	c.m[key] = redisClient{fingerprint: fp, client: cl}
	return cl, nil
}

func (c *redisClients) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc, ok := c.m[key]; ok {
		_ = rc.client.Close()
		delete(c.m, key)
	}
}

// Start implements manager.Runnable: it closes every client at shutdown.
func (c *redisClients) Start(ctx context.Context) error {
	<-ctx.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, rc := range c.m {
		_ = rc.client.Close()
		delete(c.m, k)
	}
	return nil
}

var errCredentials = errors.New("credentials missing")

// credentials reads the policy's credentials Secret (and TLS CA Secret).
func (r *HotKeyPolicyReconciler) credentials(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (Credentials, error) {
	var creds Credentials
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	read := func(name string) (*corev1.Secret, error) {
		s := &corev1.Secret{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: policy.Namespace, Name: name}, s)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: Secret %q not found", errCredentials, name)
		}
		return s, err
	}
	t := policy.Spec.Target
	if ref := t.CredentialsSecretRef; ref != nil {
		s, err := read(ref.Name)
		if err != nil {
			return creds, err
		}
		pw, ok := s.Data["password"]
		if !ok {
			return creds, fmt.Errorf("%w: Secret %q has no key \"password\"", errCredentials, ref.Name)
		}
		creds.Username, creds.Password = string(s.Data["username"]), string(pw)
	}
	if t.TLS != nil && t.TLS.CASecretRef != nil {
		s, err := read(t.TLS.CASecretRef.Name)
		if err != nil {
			return creds, err
		}
		creds.CA = s.Data["ca.crt"]
	}
	return creds, nil
}

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

// fill is one key whose replicas are filled from the base value.
type fill struct {
	key      string
	replicas int
	ttl      time.Duration
	// refill marks the second fill of a key, once the table that replicates
	// it has reached every sidecar (see refillBook); it is not repeated.
	refill bool
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
	cl, err := p.r.redis.get(client.ObjectKeyFromObject(p.policy), p.policy.Spec.Target, creds)
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
		g, ok := generation(out.Entries, ref)
		if !ok {
			continue
		}
		fr, err := folder.Generation(ctx, ref.Key, g)
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
		if _, still := generation(out.Entries, ref); still {
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
func (p *redisPass) fill(ctx context.Context, fills []fill) {
	if len(fills) == 0 {
		return
	}
	cl := p.client(ctx)
	if cl == nil {
		return
	}
	key := client.ObjectKeyFromObject(p.policy)
	for i, f := range fills {
		if err := fillReplicas(ctx, cl, f); err != nil {
			p.redisFailed(ctx, err)
			// The table already replicates these keys, so the next pass
			// would not see them as new: keep them as refills to retry.
			for _, rest := range fills[i:] {
				rest.refill = false
				p.r.refills.filled(key, rest, p.res.retryAt)
			}
			return
		}
		p.res.filled++
		p.r.refills.filled(key, f, p.now.Add(p.r.Margin))
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

func generation(entries []routing.Entry, ref decide.GenRef) (routing.Generation, bool) {
	t := routing.Table{Entries: entries}
	e := t.Lookup(ref.Key)
	if e == nil || e.Split == nil {
		return routing.Generation{}, false
	}
	for _, g := range e.Split.Generations {
		if g.FromEpoch == ref.FromEpoch {
			return g, true
		}
	}
	return routing.Generation{}, false
}

// fills lists the replica fills this pass must do: keys whose replication
// is new or resized, keys pre-warming for a schedule, and due refills of
// keys still replicated alike.
func (r *HotKeyPolicyReconciler) fills(key types.NamespacedName, spec *v1alpha1.HotKeyPolicySpec, prev *published, out *decide.Output, evs []schedule.Event, now time.Time) []fill {
	due := r.refills.due(key, now)
	prewarming := map[string]bool{}
	for _, ev := range evs {
		if !now.Before(ev.PrewarmAt) && !now.After(ev.Start.Add(r.Margin)) {
			for i := range spec.Schedules {
				if spec.Schedules[i].Name == ev.Name {
					for _, k := range spec.Schedules[i].Keys {
						prewarming[k] = true
					}
				}
			}
		}
	}
	var out2 []fill
	for _, e := range out.Entries {
		if e.Replicate == nil {
			continue
		}
		changed := true
		if prev.Table != nil {
			if pe := prev.Table.Lookup(e.Key); pe != nil && pe.Replicate != nil && *pe.Replicate == *e.Replicate {
				changed = false
			}
		}
		f := fill{key: e.Key, replicas: int(e.Replicate.Replicas), ttl: time.Duration(e.Replicate.TTLMillis) * time.Millisecond}
		switch {
		case changed || prewarming[e.Key]:
			out2 = append(out2, f)
		case due[e.Key] == f.replicas:
			f.refill = true
			out2 = append(out2, f)
		}
	}
	r.refills.drop(key, out.Entries)
	return out2
}

// refillBook remembers, per policy, the keys to fill once more when the
// table that replicates them has reached every sidecar. A fill copies the
// base into the replicas as the table is published; until the sidecars load
// it (within the margin), writes go through the old table to the base key
// only, so the replicas would serve a stale value until the next write or
// their TTL. The refill after the margin closes that gap: from then on
// every write updates the replicas too. It is memory only: a manager
// restart in that window loses the refill, and the replica TTL bounds the
// staleness then.
type refillBook struct {
	mu sync.Mutex
	m  map[types.NamespacedName]map[string]refillAt
}

type refillAt struct {
	at       time.Time
	replicas int
}

// filled records a fill of f; a first fill schedules its refill at at.
func (b *refillBook) filled(key types.NamespacedName, f fill, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.refill {
		delete(b.m[key], f.key)
		return
	}
	if b.m == nil {
		b.m = make(map[types.NamespacedName]map[string]refillAt)
	}
	if b.m[key] == nil {
		b.m[key] = make(map[string]refillAt)
	}
	b.m[key][f.key] = refillAt{at: at, replicas: f.replicas}
}

// due returns the keys whose refill is due, with their replica counts.
func (b *refillBook) due(key types.NamespacedName, now time.Time) map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for k, ra := range b.m[key] {
		if !now.Before(ra.at) {
			out[k] = ra.replicas
		}
	}
	return out
}

// drop forgets the refills of keys no longer replicated alike.
func (b *refillBook) drop(key types.NamespacedName, entries []routing.Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m[key]) == 0 {
		return
	}
	t := routing.Table{Entries: entries}
	for k, ra := range b.m[key] {
		if e := t.Lookup(k); e == nil || e.Replicate == nil || int(e.Replicate.Replicas) != ra.replicas {
			delete(b.m[key], k)
		}
	}
}

// next is the earliest pending refill of the policy (zero if none).
func (b *refillBook) next(key types.NamespacedName) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out time.Time
	for _, ra := range b.m[key] {
		out = earliest(out, ra.at)
	}
	return out
}

func (b *refillBook) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}

// fillReplicas copies the base value into every replica with the replica
// TTL. A missing base key leaves the replicas alone (readers fall back to
// the base key); a non-string value is skipped, not an error of the policy.
func fillReplicas(ctx context.Context, cl redis.UniversalClient, f fill) error {
	v, err := cl.Get(ctx, f.key).Result()
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
		for _, k := range routing.ReplicaKeys(f.key, f.replicas) {
			p.Set(ctx, k, v, f.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pre-warm: write replicas: %w", err)
	}
	return nil
}

// scheduledKeys expands events in or before their window into keys.
func scheduledKeys(spec *v1alpha1.HotKeyPolicySpec, evs []schedule.Event) []decide.ScheduledKey {
	var out []decide.ScheduledKey
	for _, ev := range evs {
		for i := range spec.Schedules {
			s := &spec.Schedules[i]
			if s.Name != ev.Name {
				continue
			}
			for _, k := range s.Keys {
				out = append(out, decide.ScheduledKey{Key: k, Schedule: s.Name, PrewarmAt: ev.PrewarmAt, Start: ev.Start, End: ev.End, Mitigation: s.Mitigation})
			}
		}
	}
	return out
}
