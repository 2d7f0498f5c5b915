package controllers

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
)

// TestDialRedisClientCertificate: the manager's client presents the
// certificate of spec.target.tls.clientCertSecretRef to a real Redis with
// tls-auth-clients yes, and is refused without it.
func TestDialRedisClientCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, dir, "server-ca"), testpki.NewCA(t, dir, "client-ca")
	tlsAddr, _ := testpki.MTLSRedis(t, dir, serverCA, clientCA)
	caPEM, err := os.ReadFile(serverCA.File)
	if err != nil {
		t.Fatal(err)
	}
	target := v1alpha1.RedisTarget{Addresses: []string{tlsAddr}, TLS: &v1alpha1.RedisTLS{
		CASecretRef:         &corev1.LocalObjectReference{Name: "ca"},
		ClientCertSecretRef: &corev1.LocalObjectReference{Name: "client"},
	}}
	ctx := context.Background()
	ping := func(creds Credentials) error {
		cl, err := DialRedis(target, creds)
		if err != nil {
			return err
		}
		defer cl.Close()
		return cl.Ping(ctx).Err()
	}
	if err := ping(Credentials{CA: caPEM}); err == nil {
		t.Error("a client without a certificate was accepted by a Redis with tls-auth-clients yes")
	}
	cert, key := clientCA.IssuePEM(t, "heatsink-manager", false)
	if err := ping(Credentials{CA: caPEM, Cert: cert, Key: key}); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if _, err := DialRedis(target, Credentials{CA: caPEM, Cert: cert, Key: caPEM}); err == nil {
		t.Error("a certificate with a key that is no key was accepted")
	}
}

// TestPolicyClientKeptAcrossReads: the policy is read anew at every pass;
// the same target (TLS Secret references included) keeps its client, a
// renewed client certificate opens a new one.
func TestPolicyClientKeptAcrossReads(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	target := v1alpha1.RedisTarget{Addresses: []string{"127.0.0.1:1"}, TLS: &v1alpha1.RedisTLS{
		CASecretRef:         &corev1.LocalObjectReference{Name: "ca"},
		ClientCertSecretRef: &corev1.LocalObjectReference{Name: "client"},
	}}
	dial := func(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
		return redis.NewClient(&redis.Options{Addr: target.Addresses[0]}), nil
	}
	var m memory
	defer m.forget(key)
	get := func(target v1alpha1.RedisTarget, c Credentials) redis.UniversalClient {
		var cl redis.UniversalClient
		var err error
		m.with(key, func(pm *policyMemory) { cl, err = pm.client(dial, target, c) })
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	creds := Credentials{Cert: []byte("cert 1"), Key: []byte("key 1")}
	// Two reads of the policy, both kept: equal values at different
	// addresses.
	read1, read2 := target.DeepCopy(), target.DeepCopy()
	first := get(*read1, creds)
	if again := get(*read2, creds); again != first {
		t.Error("the same target read again opened a new client")
	}
	renewed := get(*target.DeepCopy(), Credentials{Cert: []byte("cert 2"), Key: []byte("key 2")})
	if renewed == first {
		t.Error("a renewed client certificate kept the old client")
	}
	if read1.TLS.CASecretRef == read2.TLS.CASecretRef {
		t.Fatal("the two reads share their Secret references")
	}
	if !errors.Is(first.Ping(context.Background()).Err(), redis.ErrClosed) {
		t.Error("the client of the old certificate was not closed")
	}
}
