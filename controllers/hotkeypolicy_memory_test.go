package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/types"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestMemory is a unit test of the reconciler's per-policy memory (no API
// server; the clients never connect): a policy's Redis client is kept while
// its target and credentials hold, and closed when they change, when the
// policy is forgotten (with the rest of its memory) or at shutdown.
func TestMemory(t *testing.T) {
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	target := v1alpha1.RedisTarget{Addresses: []string{"127.0.0.1:1"}}
	creds := Credentials{Password: "one"}
	dial := func(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
		return redis.NewClient(&redis.Options{Addr: target.Addresses[0], Password: creds.Password}), nil
	}
	closed := func(cl redis.UniversalClient) bool {
		return errors.Is(cl.Ping(context.Background()).Err(), redis.ErrClosed)
	}
	for name, tc := range map[string]struct {
		// then is a's second request of a client (nil: none).
		then *Credentials
		// forget forgets a; shutdown stops the manager.
		forget, shutdown bool

		wantSame, wantFirstClosed, wantOtherClosed, wantRemembered bool
	}{
		"the same target and credentials get the same client": {then: &creds,
			wantSame: true, wantRemembered: true},
		"new credentials get a new client, the old one closed": {then: &Credentials{Password: "two"},
			wantFirstClosed: true, wantRemembered: true},
		"forget closes the policy's client and drops its memory, not another's": {forget: true,
			wantFirstClosed: true},
		"shutdown closes every client": {shutdown: true,
			wantFirstClosed: true, wantOtherClosed: true, wantRemembered: true},
	} {
		t.Run(name, func(t *testing.T) {
			var m memory
			defer func() { m.forget(a); m.forget(b) }()
			get := func(key types.NamespacedName, c Credentials) redis.UniversalClient {
				var cl redis.UniversalClient
				var err error
				m.with(key, func(pm *policyMemory) { cl, err = pm.client(dial, target, c) })
				if err != nil {
					t.Fatal(err)
				}
				return cl
			}
			first, other := get(a, creds), get(b, creds)
			m.with(a, func(pm *policyMemory) { pm.ratesShown = statusNow })
			if tc.then != nil {
				if got := get(a, *tc.then); (got == first) != tc.wantSame {
					t.Errorf("second client is the first: %v, want %v", got == first, tc.wantSame)
				}
			}
			if tc.forget {
				m.forget(a)
			}
			if tc.shutdown {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if err := m.Start(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := closed(first); got != tc.wantFirstClosed {
				t.Errorf("first client closed: %v, want %v", got, tc.wantFirstClosed)
			}
			if got := closed(other); got != tc.wantOtherClosed {
				t.Errorf("the other policy's client closed: %v, want %v", got, tc.wantOtherClosed)
			}
			var shown time.Time
			m.with(a, func(pm *policyMemory) { shown = pm.ratesShown })
			if got := shown.Equal(statusNow); got != tc.wantRemembered {
				t.Errorf("memory kept: %v, want %v", got, tc.wantRemembered)
			}
		})
	}
}
