package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/types"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// policyMemory is everything the reconciler remembers of one policy between
// passes. It lives in the manager's memory only: a new leader starts without
// and rebuilds it (it writes the report and status once, parses the routing
// ConfigMap, restarts the hysteresis timers, opens a client), which can only
// cost a write or delay a change, never lose a mitigation.
type policyMemory struct {
	// report is the last aggregated report written (see writeReport).
	report reportState
	// ratesShown is when status last refreshed the rates of keys it already
	// showed (see ratesDue).
	ratesShown time.Time
	// written is the last status write (see caughtUp).
	written writtenStatus
	// parsed is the last parsed routing ConfigMap, with the leader's state
	// (timers included) of the last pass (see parsedEntry).
	parsed parsedEntry
	// refills are the keys to fill once more (see refills).
	refills refills
	// redis is the policy's Redis client, nil until a pass needs one (see
	// redisClient).
	redis *redisClient
	// capacity is the learned capacity of the policy's Redis nodes.
	capacity policyCapacity
	// bigOver are the keys at or over thresholds.valueBytes at the last
	// pass (see noteBigKeys).
	bigOver map[string]bool
	// withheld maps each key a move was left out for at the last pass to
	// why (see noteWithheld).
	withheld map[string]string
	// sizes are the big keys' sizes MEMORY USAGE told (see confirmSizes).
	sizes policySizes
	// endpointsDropped is how many pod endpoints the last pass's directive
	// left out (see captureEndpoints): the cut is logged when it changes.
	endpointsDropped int
}

// memory holds the policyMemory of every policy. One mutex guards it all:
// reconciles of different policies run on several workers, the hub's
// priming (primeFleet) loads every policy's routing ConfigMap from its own
// goroutine, and the manager's shutdown (Start) closes the Redis clients. A
// caller holds the lock only while it reads or updates an entry (with),
// never across a call to the API server or Redis; parsing happens outside.
// The zero value is ready to use.
type memory struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*policyMemory
}

// with runs f on key's memory (an empty one if there is none yet) under the
// lock. f must not block: it reads or updates fields, nothing more.
func (m *memory) with(key types.NamespacedName, f func(*policyMemory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pm, ok := m.m[key]
	if !ok {
		if m.m == nil {
			m.m = make(map[types.NamespacedName]*policyMemory)
		}
		pm = &policyMemory{}
		m.m[key] = pm
	}
	f(pm)
}

// forget drops all the reconciler remembers of a policy and closes its
// Redis client.
func (m *memory) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pm, ok := m.m[key]; ok {
		pm.closeRedis()
		delete(m.m, key)
	}
}

// Start implements manager.Runnable: it closes every Redis client at
// shutdown (the rest of the memory goes with the process).
func (m *memory) Start(ctx context.Context) error {
	<-ctx.Done()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pm := range m.m {
		pm.closeRedis()
	}
	return nil
}

// redisClient is a policy's open Redis client and the fingerprint of the
// target and credentials it was opened with.
type redisClient struct {
	fingerprint string
	client      redis.UniversalClient
}

// client returns the policy's Redis client, opened with dial on first use
// and opened again (the old one closed) when the target or the credentials
// change. dial does not connect (see DialRedis), so it is called under the
// lock.
func (pm *policyMemory) client(dial RedisDialer, target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%q %v %d %v %q %q %q %q %q", target.Addresses, target.Cluster, target.Database, target.TLS, creds.Username, creds.Password, creds.CA, creds.Cert, creds.Key)
	if sn := target.Sentinel; sn != nil {
		fmt.Fprintf(h, " sentinel %q %q %q %q", sn.Addresses, sn.MasterName, creds.SentinelUsername, creds.SentinelPassword)
	}
	fp := hex.EncodeToString(h.Sum(nil))
	if pm.redis != nil && pm.redis.fingerprint == fp {
		return pm.redis.client, nil
	}
	pm.closeRedis()
	cl, err := dial(target, creds)
	if err != nil {
		return nil, err
	}
	pm.redis = &redisClient{fingerprint: fp, client: cl}
	return cl, nil
}

func (pm *policyMemory) closeRedis() {
	if pm.redis != nil {
		_ = pm.redis.client.Close()
		pm.redis = nil
	}
}
