package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// Credentials are the Redis ACL user and password of a target.
type Credentials struct {
	Username string
	Password string
	// CA is the PEM bundle of RedisTLS.caSecretRef, if any.
	CA []byte
	// Cert and Key are the PEM client certificate and key of
	// RedisTLS.clientCertSecretRef, if any. The Secret is read at every
	// pass, and a changed pair opens a new client (see policyMemory.client).
	Cert, Key []byte
	// SentinelUsername and SentinelPassword are the Sentinels' own
	// credentials (RedisSentinel.credentialsSecretRef), if any.
	SentinelUsername, SentinelPassword string
}

// RedisDialer opens a client to a policy's target. Tests may substitute one;
// production uses DialRedis.
type RedisDialer func(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error)

// DialRedis opens a go-redis client (cluster, standalone, or the master
// that Sentinels name) to target. It does not connect until first use.
func DialRedis(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
	tc, err := redisTLS(target, creds)
	if err != nil {
		return nil, err
	}
	// ContextTimeoutEnabled makes every op honour the pass deadline (see
	// DefaultRedisTimeout) on top of the per-op timeouts, retries included.
	// One dial per attempt (go-redis tries 5, 100 ms apart): a pass stops
	// at its first failure and is retried after the margin, so dialling a
	// Redis that refuses again within the pass only holds a worker, 1.7 s
	// per op instead of 0.08 s. Deleted policies whose Redis was gone,
	// retrying their drains, held every worker that way, and another
	// policy's withdrawal came 4-5 s late (test/clients
	// TestGoneTargetsDoNotDelayAWithdrawal).
	const timeout, dials = redisOpTimeout, 1
	if sn := target.Sentinel; sn != nil {
		// go-redis' FailoverClient asks the Sentinels for the master,
		// checks its role and follows +switch-master, as the sidecar does.
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: sn.MasterName, SentinelAddrs: sn.Addresses,
			SentinelUsername: creds.SentinelUsername, SentinelPassword: creds.SentinelPassword,
			Username: creds.Username, Password: creds.Password,
			TLSConfig: tc, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true, DialerRetries: dials,
		}), nil
	}
	if target.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: target.Addresses, Username: creds.Username, Password: creds.Password,
			TLSConfig: tc, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true, DialerRetries: dials}), nil
	}
	if len(target.Addresses) == 0 {
		return nil, errors.New("redis target has no address")
	}
	// DB: folds and replica fills act in the database the policy governs
	// (a cluster has only database 0, which the schema enforces).
	return redis.NewClient(&redis.Options{Addr: target.Addresses[0], DB: int(target.Database), Username: creds.Username, Password: creds.Password,
		TLSConfig: tc, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true, DialerRetries: dials}), nil
}

// redisOpTimeout bounds each dial, read and write of the manager's Redis
// (and Sentinel) clients.
const redisOpTimeout = 2 * time.Second

// redisTLS is the TLS configuration for target's Redis (and Sentinels):
// nil without target.tls.
func redisTLS(target v1alpha1.RedisTarget, creds Credentials) (*tls.Config, error) {
	if target.TLS == nil {
		return nil, nil
	}
	tc := &tls.Config{ServerName: target.TLS.ServerName, MinVersion: tls.VersionTLS12}
	if len(creds.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(creds.CA) {
			return nil, errors.New("redis TLS: ca.crt holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if len(creds.Cert) > 0 || len(creds.Key) > 0 {
		pair, err := tls.X509KeyPair(creds.Cert, creds.Key)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

var errCredentials = errors.New("credentials missing")

// credentials reads the policy's credentials Secret and its TLS CA and
// client certificate Secrets.
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
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("%w: the manager may not read Secret %q in namespace %q: the installer grants reads per namespace (chart value rbac.secretNamespaces)", errCredentials, name, policy.Namespace)
		}
		return s, err
	}
	t := policy.Spec.Target
	// userAndPassword reads a credentials Secret: key password required,
	// username optional (Redis' default user).
	userAndPassword := func(name string) (user, password string, err error) {
		s, err := read(name)
		if err != nil {
			return "", "", err
		}
		pw, ok := s.Data["password"]
		if !ok {
			return "", "", fmt.Errorf("%w: Secret %q has no key \"password\"", errCredentials, name)
		}
		return string(s.Data["username"]), string(pw), nil
	}
	var err error
	if ref := t.CredentialsSecretRef; ref != nil {
		if creds.Username, creds.Password, err = userAndPassword(ref.Name); err != nil {
			return creds, err
		}
	}
	if t.Sentinel != nil && t.Sentinel.CredentialsSecretRef != nil {
		if creds.SentinelUsername, creds.SentinelPassword, err = userAndPassword(t.Sentinel.CredentialsSecretRef.Name); err != nil {
			return creds, err
		}
	}
	if t.TLS != nil && t.TLS.CASecretRef != nil {
		s, err := read(t.TLS.CASecretRef.Name)
		if err != nil {
			return creds, err
		}
		creds.CA = s.Data["ca.crt"]
	}
	if t.TLS != nil && t.TLS.ClientCertSecretRef != nil {
		name := t.TLS.ClientCertSecretRef.Name
		s, err := read(name)
		if err != nil {
			return creds, err
		}
		creds.Cert, creds.Key = s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
		if len(creds.Cert) == 0 || len(creds.Key) == 0 {
			return creds, fmt.Errorf("%w: Secret %q lacks %q or %q (a kubernetes.io/tls Secret has both)", errCredentials, name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		}
	}
	return creds, nil
}
