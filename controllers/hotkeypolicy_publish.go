package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// StateKey is the routing ConfigMap key holding the manager's own state (the
// hysteresis timers and, in Observe mode, the entries it would publish).
// Keeping it beside the table it explains means a restarted or newly elected
// manager continues exactly where the last one stopped; data-path readers
// only read routing.ConfigMapKey.
const StateKey = "manager-state.json"

// FieldOwner is the server-side apply field manager of the routing ConfigMap.
const FieldOwner = "heatsink-manager"

// LabelManagedBy marks the ConfigMaps the manager writes; cmd/heatsink limits
// its ConfigMap cache to them.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// stateDoc is the JSON under StateKey.
type stateDoc struct {
	Keys []decide.KeyState `json:"keys,omitempty"`
	// Observed are the entries decided in Observe mode (not published).
	Observed []routing.Entry `json:"observedEntries,omitempty"`
}

// published is what the routing ConfigMap holds now.
type published struct {
	Table   *routing.Table // nil when absent or unreadable
	State   decide.State
	Observe []routing.Entry
	// Version is the greatest routing version ever published: the table's
	// or status.routingVersion, whichever is larger.
	Version   int64
	tableJSON string
	stateJSON string
	exists    bool
	// held: the ConfigMap carries Finalizer, so that a foreground cascading
	// deletion cannot remove it before the policy's split keys are drained.
	held bool
	// terminating: the ConfigMap is being deleted (held until released).
	terminating bool
}

// decided is the table the previous decision produced, which the next one
// starts from (its split generations in particular).
// In Observe mode that is the unpublished decision kept in the state; after a
// switch to Enforce, only what was published counts, so that a generation
// never published cannot take effect without its announcement.
func (p *published) decided(mode v1alpha1.PolicyMode) *routing.Table {
	if mode == v1alpha1.ModeObserve {
		t := routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: 1, Entries: p.Observe}
		if p.Table != nil {
			t.EpochMillis = p.Table.EpochMillis
		}
		return &t
	}
	return p.Table
}

func routingName(p *v1alpha1.HotKeyPolicy) string { return routing.ConfigMapName(p.Name) }

// loadPublished reads the routing ConfigMap. An unreadable table or state is
// logged and treated as absent, except for its version, which only grows.
func (r *HotKeyPolicyReconciler) loadPublished(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (*published, error) {
	p := &published{Version: policy.Status.RoutingVersion}
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: policy.Namespace, Name: routingName(policy)}, cm)
	if apierrors.IsNotFound(err) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get routing ConfigMap: %w", err)
	}
	p.exists = true
	p.held = controllerutil.ContainsFinalizer(cm, Finalizer)
	p.terminating = !cm.DeletionTimestamp.IsZero()
	p.tableJSON, p.stateJSON = cm.Data[routing.ConfigMapKey], cm.Data[StateKey]
	if c, ok := r.parsed.get(client.ObjectKeyFromObject(policy), cm.ResourceVersion); ok {
		p.Table, p.State, p.Observe = c.Table, c.State, c.Observe
		if p.Table != nil {
			p.Version = max(p.Version, p.Table.Version)
		}
		return p, nil
	}
	defer func() { r.parsed.put(client.ObjectKeyFromObject(policy), cm.ResourceVersion, p) }()
	if p.tableJSON != "" {
		t, err := routing.Parse([]byte(p.tableJSON))
		if err != nil {
			log.FromContext(ctx).Error(err, "published routing table unreadable; starting over")
			var v struct {
				Version int64 `json:"version"`
			}
			_ = json.Unmarshal([]byte(p.tableJSON), &v)
			p.Version = max(p.Version, v.Version)
		} else {
			p.Table = t
			p.Version = max(p.Version, t.Version)
		}
	}
	if p.stateJSON != "" {
		var doc stateDoc
		if err := json.Unmarshal([]byte(p.stateJSON), &doc); err != nil {
			log.FromContext(ctx).Error(err, "manager state unreadable; hysteresis timers restart")
		} else {
			p.State = decide.State{Keys: doc.Keys}
			p.Observe = doc.Observed
		}
	}
	return p, nil
}

// parsedCache keeps the last parsed routing ConfigMap of each policy by
// resourceVersion: a 1,000-entry table costs milliseconds to parse and
// validate, and most passes find it unchanged. Decisions never mutate it.
type parsedCache struct {
	mu sync.Mutex
	m  map[types.NamespacedName]parsedEntry
}

type parsedEntry struct {
	rv string
	p  *published
}

func (c *parsedCache) get(key types.NamespacedName, rv string) (*published, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.rv != rv || rv == "" {
		return nil, false
	}
	return e.p, true
}

func (c *parsedCache) put(key types.NamespacedName, rv string, p *published) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[types.NamespacedName]parsedEntry)
	}
	c.m[key] = parsedEntry{rv: rv, p: p}
}

func (c *parsedCache) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// publishResult says what publish did.
type publishResult struct {
	version int64
	wrote   bool
	err     error
	// draining counts the split keys published in Observe mode: splits from
	// before the switch, published until folded.
	draining int
}

// publish writes the routing ConfigMap with server-side apply, only when its
// content changes. The version grows by one whenever the entries change. The
// table holds enforced's entries; in Observe mode those are only the splits
// still draining, and the decided entries (out) go to the state.
func (r *HotKeyPolicyReconciler) publish(ctx context.Context, policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, prev *published, out, enforced *decide.Output) publishResult {
	entries := []routing.Entry{}
	doc := stateDoc{Keys: out.State.Keys}
	if spec.Mode == v1alpha1.ModeObserve {
		doc.Observed = out.Entries
		if doc.Observed == nil {
			doc.Observed = []routing.Entry{}
		}
	}
	if enforced.Entries != nil {
		entries = enforced.Entries
	}
	t := &routing.Table{
		SchemaVersion: routing.SchemaVersion,
		Policy:        policy.Namespace + "/" + policy.Name,
		Version:       prev.Version,
		EpochMillis:   spec.Mitigations.Split.Epoch.Milliseconds(),
		Entries:       entries,
	}
	// Same entries and epoch length serialise to the same bytes at the same
	// version: compare bytes, and bump the version only on a difference.
	tableJSON, err := t.Marshal()
	if err != nil {
		return publishResult{version: prev.Version, err: fmt.Errorf("routing table: %w", err)}
	}
	if prev.Table == nil || prev.Version == 0 || string(tableJSON) != prev.tableJSON {
		t.Version = prev.Version + 1
		if tableJSON, err = t.Marshal(); err != nil {
			return publishResult{version: prev.Version, err: fmt.Errorf("routing table: %w", err)}
		}
	}
	stateJSON, err := json.Marshal(doc)
	if err != nil {
		return publishResult{version: prev.Version, err: err}
	}
	draining := 0
	if spec.Mode == v1alpha1.ModeObserve {
		draining = len(entries)
	}
	if prev.exists && prev.held && string(tableJSON) == prev.tableJSON && string(stateJSON) == prev.stateJSON {
		return publishResult{version: t.Version, draining: draining}
	}
	ac := corev1ac.ConfigMap(routingName(policy), policy.Namespace).
		WithLabels(map[string]string{LabelManagedBy: "heatsink", v1alpha1.LabelPolicy: policy.Name}).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(v1alpha1.GroupVersion.String()).
			WithKind("HotKeyPolicy").
			WithName(policy.Name).
			WithUID(policy.UID).
			WithController(true).
			WithBlockOwnerDeletion(true)).
		// Held until the policy's split keys are drained: a foreground
		// cascading deletion deletes dependents first, and without the
		// table the drain would not know the splits.
		WithFinalizers(Finalizer).
		WithData(map[string]string{routing.ConfigMapKey: string(tableJSON), StateKey: string(stateJSON)})
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return publishResult{version: prev.Version, err: fmt.Errorf("apply routing ConfigMap: %w", err)}
	}
	if t.Version != prev.Version {
		r.Metrics.publications.Inc()
	}
	return publishResult{version: t.Version, wrote: true, draining: draining}
}
