package certs_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/internal/certs"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

const (
	mutName = "heatsink-mutating-webhook-configuration"
	valName = "heatsink-validating-webhook-configuration"
)

// harmlessRules match a resource nobody creates, so the webhooks (which point
// at no server) never get in the test's way.
var harmlessRules = []admissionregistrationv1.RuleWithOperations{{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
	Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.test"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
}}

func webhookConfigs() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	svc := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "heatsink-system", Name: "heatsink-webhook-service", Path: &path}}
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mutName}}
	for _, n := range []string{"a.heatsink.dev", "b.heatsink.dev"} {
		m.Webhooks = append(m.Webhooks, admissionregistrationv1.MutatingWebhook{Name: n, ClientConfig: svc("/m"), Rules: harmlessRules, SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}})
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: valName}}
	v.Webhooks = append(v.Webhooks, admissionregistrationv1.ValidatingWebhook{Name: "v.heatsink.dev", ClientConfig: svc("/v"), Rules: harmlessRules, SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}})
	return m, v
}

func TestRotatorAgainstAPIServer(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, "heatsink-system"); err != nil {
		t.Fatal(err)
	}
	m, v := webhookConfigs()
	if err := cp.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	cfg := certs.Config{
		DNSNames:     []string{"heatsink-webhook-service.heatsink-system.svc"},
		CAValidity:   300 * 24 * time.Hour,
		CertValidity: 30 * 24 * time.Hour,
	}
	newRotator := func() *certs.Rotator {
		return &certs.Rotator{
			Client:             cp.Client,
			Secret:             types.NamespacedName{Namespace: "heatsink-system", Name: "heatsink-webhook-cert"},
			MutatingWebhooks:   []string{mutName},
			ValidatingWebhooks: []string{valName},
			Config:             cfg,
			Clock:              clk,
			Interval:           time.Hour,
			Log:                testr.New(t),
		}
	}
	// caBundles returns the caBundle of every webhook of both configurations.
	caBundles := func() [][]byte {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := cp.Client.Get(ctx, types.NamespacedName{Name: mutName}, m); err != nil {
			t.Fatal(err)
		}
		if err := cp.Client.Get(ctx, types.NamespacedName{Name: valName}, v); err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for _, w := range m.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		for _, w := range v.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		return out
	}
	secret := func() *certs.Bundle {
		s := &corev1.Secret{}
		if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: "heatsink-system", Name: "heatsink-webhook-cert"}, s); err != nil {
			t.Fatal(err)
		}
		return certs.FromData(s.Data)
	}
	// served checks that what replica r serves verifies against every caBundle.
	served := func(r *certs.Rotator) []byte {
		t.Helper()
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		for i, ca := range caBundles() {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				t.Fatalf("webhook %d has no caBundle", i)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: cfg.DNSNames[0], CurrentTime: clk.Now()}); err != nil {
				t.Fatalf("webhook %d does not trust the served certificate: %v", i, err)
			}
		}
		return c.Certificate[0]
	}

	r1, r2 := newRotator(), newRotator()
	if _, err := r1.GetCertificate(nil); err == nil {
		t.Fatal("a certificate before the first sync")
	}
	if err := r1.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := secret()
	if err := r2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served(r1), served(r2)) || !secret().Equal(first) {
		t.Fatal("a second replica did not adopt the first one's certificate")
	}

	// Past the serving certificate's renewal point: a new certificate, same CA.
	clk.Step(21 * 24 * time.Hour)
	if err := r1.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	renewed := secret()
	if bytes.Equal(renewed.Cert, first.Cert) || !bytes.Equal(renewed.CACert, first.CACert) {
		t.Fatal("serving certificate not renewed, or CA changed")
	}
	if err := r2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served(r1), served(r2)) {
		t.Fatal("replicas serve different certificates after a renewal")
	}

	// The background loop: a caBundle wiped by someone is restored at the
	// next tick, and a CA rotation reaches the webhook configurations.
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r1.Start(runCtx) }()
	defer func() { cancel(); <-done }()
	m = &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: mutName}, m); err != nil {
		t.Fatal(err)
	}
	m.Webhooks[1].ClientConfig.CABundle = nil
	if err := cp.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	clk.Step(181 * 24 * time.Hour) // CA past 2/3 of its life
	tick := func(cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			if clk.HasWaiters() {
				clk.Step(time.Hour)
			}
			return cond(), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	tick(func() bool {
		for _, b := range caBundles() {
			if len(b) == 0 || bytes.Count(b, []byte("BEGIN CERTIFICATE")) != 2 {
				return false
			}
		}
		return true
	})
	// After the grace period the serving certificate moves to the new CA.
	tick(func() bool {
		return !bytes.Equal(secret().CACert, first.CACert) && !bytes.Equal(secret().Cert, renewed.Cert)
	})
	tick(func() bool {
		c, err := r1.GetCertificate(nil)
		block, _ := pem.Decode(secret().Cert)
		return err == nil && block != nil && bytes.Equal(c.Certificate[0], block.Bytes)
	})
	if err := r2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	served(r1)
	served(r2)
}
