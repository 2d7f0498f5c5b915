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
	"github.com/heatsink-dev/heatsink/decide"
	"github.com/heatsink-dev/heatsink/fold"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/schedule"
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
	const timeout = 2 * time.Second
	if target.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: target.Addresses, Username: creds.Username, Password: creds.Password,
			TLSConfig: tc, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout}), nil
	}
	if len(target.Addresses) == 0 {
		return nil, errors.New("redis target has no address")
	}
	return redis.NewClient(&redis.Options{Addr: target.Addresses[0], Username: creds.Username, Password: creds.Password,
		TLSConfig: tc, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout}), nil
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

// actResult says what happened in Redis.
type actResult struct {
	// reason and message are set when part of the work failed.
	reason, message string
	// retryAt is set when folds remain (retry after the margin).
	retryAt time.Time
	filled  int
}

// fill is one key whose replicas are filled from the base value.
type fill struct {
	key      string
	replicas int
	ttl      time.Duration
}

// actInRedis folds retired generations (removing the folded ones from
// out.Entries) and fills the replicas of keys about to be replicated:
// scheduled keys from their pre-warm time until just after their start, and
// keys whose replication is new or resized. out is what is enforced (see
// enforced): in Observe mode only the drain of published splits, which has
// folds and no replicas, so nothing else is written.
func (r *HotKeyPolicyReconciler) actInRedis(ctx context.Context, policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, prev *published, out *decide.Output, evs []schedule.Event, now time.Time) actResult {
	var res actResult
	fills := r.fills(spec, prev, out, evs, now)
	if len(fills) == 0 && len(out.Folds) == 0 {
		return res
	}
	creds, err := r.credentials(ctx, policy)
	if err != nil {
		res.reason, res.message = v1alpha1.ReasonRedisUnavailable, err.Error()
		if errors.Is(err, errCredentials) {
			res.reason = v1alpha1.ReasonCredentialsMissing
		}
		res.retryAt = now.Add(r.Margin)
		return res
	}
	cl, err := r.redis.get(client.ObjectKeyFromObject(policy), policy.Spec.Target, creds)
	if err != nil {
		res.reason, res.message, res.retryAt = v1alpha1.ReasonRedisUnavailable, err.Error(), now.Add(r.Margin)
		return res
	}
	var errs []string
	if len(out.Folds) > 0 {
		done := make(map[decide.GenRef]bool)
		folder := fold.New(cl, fold.Options{})
		for _, ref := range out.Folds {
			g, ok := generation(out.Entries, ref)
			if !ok {
				continue
			}
			fr, err := folder.Generation(ctx, ref.Key, g)
			r.Metrics.foldMoves.Add(float64(fr.Moves))
			switch {
			case err != nil:
				r.Metrics.folds.WithLabelValues("error").Inc()
				errs = append(errs, err.Error())
			case fr.Done:
				r.Metrics.folds.WithLabelValues("done").Inc()
				done[ref] = true
			default:
				r.Metrics.folds.WithLabelValues("pending").Inc()
			}
			if !done[ref] {
				res.retryAt = now.Add(r.Margin)
			}
		}
		out.Entries = decide.Prune(now, spec.Mitigations.Split.Epoch.Milliseconds(), out.Entries, done)
	}
	for _, f := range fills {
		if err := fillReplicas(ctx, cl, f); err != nil {
			errs = append(errs, err.Error())
			res.retryAt = now.Add(r.Margin)
			continue
		}
		res.filled++
	}
	if len(errs) > 0 {
		log.FromContext(ctx).Error(errors.New(errs[0]), "redis work failed", "failures", len(errs))
		res.reason, res.message = v1alpha1.ReasonRedisUnavailable, fmt.Sprintf("%d Redis operations failed; first: %s", len(errs), errs[0])
	}
	return res
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

// fills lists the replica fills this pass must do.
func (r *HotKeyPolicyReconciler) fills(spec *v1alpha1.HotKeyPolicySpec, prev *published, out *decide.Output, evs []schedule.Event, now time.Time) []fill {
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
		if changed || prewarming[e.Key] {
			out2 = append(out2, fill{key: e.Key, replicas: int(e.Replicate.Replicas), ttl: time.Duration(e.Replicate.TTLMillis) * time.Millisecond})
		}
	}
	return out2
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
