package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Rotator keeps the webhook certificate Secret current, serves its
// certificate from memory and patches the CA bundle into the webhook
// configurations. Every manager replica runs one: the Secret is written with
// optimistic concurrency (create, or update at a resourceVersion), so
// replicas that race agree on one winner and all read it back.
type Rotator struct {
	// Client is an uncached client: the rotator runs before the manager's
	// cache starts, and needs no watch.
	Client client.Client
	// Secret is where the bundle is kept.
	Secret types.NamespacedName
	// MutatingWebhooks and ValidatingWebhooks are the names of the webhook
	// configurations whose every clientConfig.caBundle the rotator sets.
	MutatingWebhooks   []string
	ValidatingWebhooks []string
	Config             Config
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Interval between checks. Default: 10 minutes.
	Interval time.Duration
	Log      logr.Logger

	current atomic.Pointer[tls.Certificate]
}

// GetCertificate is a tls.Config.GetCertificate serving the current certificate.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := r.current.Load()
	if c == nil {
		return nil, errors.New("webhook certificate not loaded yet")
	}
	return c, nil
}

func (r *Rotator) clock() clock.Clock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// Sync brings the Secret, the served certificate and the webhook
// configurations' CA bundles up to date once.
func (r *Rotator) Sync(ctx context.Context) error {
	b, err := r.ensureSecret(ctx)
	if err != nil {
		return err
	}
	cert, err := b.TLSCertificate()
	if err != nil {
		return err
	}
	r.current.Store(cert)
	return r.patchCABundles(ctx, b.CABundle)
}

// ensureSecret reads the Secret, applies Next and writes the result back,
// retrying on conflicts with other replicas.
func (r *Rotator) ensureSecret(ctx context.Context) (*Bundle, error) {
	for attempt := 0; attempt < 5; attempt++ {
		sec := &corev1.Secret{}
		err := r.Client.Get(ctx, r.Secret, sec)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read webhook certificate secret %s: %w", r.Secret, err)
		}
		exists := err == nil
		var cur *Bundle
		if exists {
			cur = FromData(sec.Data)
		}
		next, reason, err := Next(r.clock().Now(), cur, r.Config)
		if err != nil {
			return nil, err
		}
		if reason == ReasonNone {
			return cur, nil
		}
		if !exists {
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: r.Secret.Namespace,
					Name:      r.Secret.Name,
					Labels:    map[string]string{"app.kubernetes.io/managed-by": "heatsink-manager"},
				},
				Type: corev1.SecretTypeOpaque,
				Data: next.Data(),
			}
			err = r.Client.Create(ctx, sec)
		} else {
			sec.Data = next.Data()
			err = r.Client.Update(ctx, sec)
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue // another replica wrote first: use its bundle
		}
		if err != nil {
			return nil, fmt.Errorf("write webhook certificate secret %s: %w", r.Secret, err)
		}
		r.Log.Info("webhook certificates updated", "reason", string(reason), "secret", r.Secret.String())
		return next, nil
	}
	return nil, fmt.Errorf("write webhook certificate secret %s: too many conflicts", r.Secret)
}

func (r *Rotator) patchCABundles(ctx context.Context, caBundle []byte) error {
	var errs []error
	for _, name := range r.MutatingWebhooks {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		errs = append(errs, r.patchOne(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				changed = setCABundle(&cfg.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return changed
		}))
	}
	for _, name := range r.ValidatingWebhooks {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errs = append(errs, r.patchOne(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				changed = setCABundle(&cfg.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return changed
		}))
	}
	return errors.Join(errs...)
}

func setCABundle(cc *admissionregistrationv1.WebhookClientConfig, caBundle []byte) bool {
	if bytes.Equal(cc.CABundle, caBundle) {
		return false
	}
	cc.CABundle = caBundle
	return true
}

// patchOne reads a webhook configuration, applies set and updates it when set
// changed something. Update, not patch, so that a concurrent change is a
// conflict, retried at the next tick, rather than lost.
func (r *Rotator) patchOne(ctx context.Context, name string, obj client.Object, set func() bool) error {
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
		return fmt.Errorf("read webhook configuration %s: %w", name, err)
	}
	if !set() {
		return nil
	}
	if err := r.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("set caBundle of webhook configuration %s: %w", name, err)
	}
	r.Log.Info("caBundle updated", "webhookConfiguration", name)
	return nil
}

// Loaded reports whether a serving certificate has been loaded.
func (r *Rotator) Loaded() bool { return r.current.Load() != nil }

// retryAfterError is how soon a failed sync is retried: a webhook
// configuration applied after the manager started gets its caBundle quickly.
const retryAfterError = 10 * time.Second

// Start syncs every Interval until ctx ends; a failed sync is logged and
// retried after 10s. It implements manager.Runnable.
func (r *Rotator) Start(ctx context.Context) error {
	interval := r.Interval
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	wait := interval
	if !r.Loaded() {
		wait = 0
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock().After(wait):
		}
		wait = interval
		if err := r.Sync(ctx); err != nil {
			r.Log.Error(err, "webhook certificate sync failed; retrying", "after", retryAfterError)
			wait = retryAfterError
		}
	}
}

// NeedLeaderElection is false: every replica serves webhooks, so every
// replica must reload the certificate.
func (r *Rotator) NeedLeaderElection() bool { return false }
