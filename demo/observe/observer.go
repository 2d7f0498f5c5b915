package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/scheme"
	"github.com/heatsink-dev/heatsink/routing"
)

// KeyTimes are the moments of one watched key, as this process saw them
// through the API server (watch events arrive within milliseconds of the
// write).
type KeyTimes struct {
	// Detected is when the manager first saw the key over a threshold (the
	// start of sustainFor), from the state it publishes with the table.
	Detected time.Time
	// Routed is when the routing table first listed the key.
	Routed time.Time
	// Dropped is when a table first left the key out after listing it
	// (zero if none did).
	Dropped time.Time
	// SplitEffective is the start of the epoch from which the first split
	// generation the key was ever given takes writes (zero if never split).
	SplitEffective time.Time
	// Entry is the key's entry in the latest routing table (nil if none).
	Entry *routing.Entry
	// Source is why the first table that listed the key did (detected or
	// scheduled).
	Source routing.Source
	// ShardsWhenRouted is the policy's status.shards as last seen when the
	// key was first routed (the thresholds in force then, at most a report
	// interval old).
	ShardsWhenRouted []v1alpha1.ShardStatus
}

// Observer follows a namespace's routing ConfigMap and HotKeyPolicy, and
// remembers when each key was detected and routed.
type Observer struct {
	policy string
	cache  cache.Cache

	mu     sync.Mutex
	keys   map[string]*KeyTimes
	table  *routing.Table
	status v1alpha1.HotKeyPolicyStatus
}

// NewObserver returns an observer of the policy named policy in namespace
// ns; Start starts it.
func NewObserver(cfg *rest.Config, ns, policy string) (*Observer, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme:            scheme.New(),
		DefaultNamespaces: map[string]cache.Config{ns: {}},
	})
	if err != nil {
		return nil, err
	}
	o := newObserver(policy)
	o.cache = c
	return o, nil
}

func newObserver(policy string) *Observer {
	return &Observer{policy: policy, keys: map[string]*KeyTimes{}}
}

// Start runs the informers until ctx ends and waits for their first list.
func (o *Observer) Start(ctx context.Context) error {
	handler := func(on func(obj any)) toolscache.ResourceEventHandler {
		return toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { on(obj) },
			UpdateFunc: func(_, obj any) { on(obj) },
		}
	}
	for _, reg := range []struct {
		obj client.Object
		on  func(any)
	}{
		{&corev1.ConfigMap{}, o.onConfigMap},
		{&v1alpha1.HotKeyPolicy{}, o.onPolicy},
	} {
		inf, err := o.cache.GetInformer(ctx, reg.obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(handler(reg.on)); err != nil {
			return err
		}
	}
	go func() { _ = o.cache.Start(ctx) }()
	if !o.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("watching policy %s: caches did not sync", o.policy)
	}
	return nil
}

func (o *Observer) key(k string) *KeyTimes {
	kt := o.keys[k]
	if kt == nil {
		kt = &KeyTimes{}
		o.keys[k] = kt
	}
	return kt
}

func (o *Observer) onConfigMap(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != routing.ConfigMapName(o.policy) {
		return
	}
	now := time.Now()
	t, err := routing.Parse([]byte(cm.Data[routing.ConfigMapKey]))
	if err != nil {
		return // keep the last good table: the manager never publishes a bad one
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.table = t
	o.detectedLocked(cm.Data[controllers.StateKey])
	for k, kt := range o.keys {
		if t.Lookup(k) == nil {
			if kt.Entry != nil && kt.Dropped.IsZero() {
				kt.Dropped = now
			}
			kt.Entry = nil
		}
	}
	for i := range t.Entries {
		e := t.Entries[i]
		kt := o.key(e.Key)
		if kt.Routed.IsZero() {
			kt.Routed, kt.Source = now, e.Source
			kt.ShardsWhenRouted = slices.Clone(o.status.Shards)
		}
		kt.Entry = &e
		if kt.SplitEffective.IsZero() && e.Split != nil {
			for _, g := range e.Split.Generations {
				if g.Shards > 0 {
					kt.SplitEffective = routing.EpochStart(g.FromEpoch, t.EpochMillis)
					break
				}
			}
		}
	}
}

// detectedLocked notes, from the manager's published state, when it first
// saw each key over a threshold: a key over it but not yet hot carries the
// time (readOverSince / writeOverSince) until sustainFor has passed.
func (o *Observer) detectedLocked(state string) {
	var st decide.State
	if state == "" || json.Unmarshal([]byte(state), &st) != nil {
		return
	}
	for key, at := range st.FirstOver() {
		if kt := o.key(key); kt.Detected.IsZero() || at.Before(kt.Detected) {
			kt.Detected = at
		}
	}
}

func (o *Observer) onPolicy(obj any) {
	p, ok := obj.(*v1alpha1.HotKeyPolicy)
	if !ok || p.Name != o.policy {
		return
	}
	o.mu.Lock()
	o.status = *p.Status.DeepCopy()
	o.mu.Unlock()
}

// Snapshot is a consistent copy of what the observer knows.
type Snapshot struct {
	Keys map[string]KeyTimes
	// Table is the latest routing table (nil before the first).
	Table  *routing.Table
	Status v1alpha1.HotKeyPolicyStatus
	// Nodes is the number of nodes whose agents the manager hears from.
	Nodes int
}

// Snapshot returns what the observer knows now.
func (o *Observer) Snapshot() Snapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := Snapshot{Keys: make(map[string]KeyTimes, len(o.keys)), Table: o.table, Status: *o.status.DeepCopy(), Nodes: int(o.status.ReportingNodes)}
	for k, v := range o.keys {
		s.Keys[k] = *v
	}
	return s
}
