package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/routing"
)

// StateKey is the routing ConfigMap key holding the durable part of the
// manager's own state (decide.State.Durable: which keys are hot, since when,
// when they were detected; in Observe mode, the entries it would publish).
// Keeping it beside the table it explains means a restarted or newly elected
// manager keeps every mitigation; data-path readers only read
// routing.ConfigMapKey. The hysteresis timers are the leader's memory (see
// parsedEntry): a new leader starts them over, which can only delay a
// change, and a timer set or cleared is no write.
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
	// durableJSON is the state as the ConfigMap holds it (its durable
	// part, see durableJSON); State has the timers of the leader's memory.
	durableJSON string
	// rv is the ConfigMap's resourceVersion.
	rv     string
	exists bool
	// held: the ConfigMap carries Finalizer, so that a foreground cascading
	// deletion cannot remove it before the policy's split keys are drained.
	held bool
	// terminating: the ConfigMap is being deleted (held until released).
	terminating bool
	// foreign: the ConfigMap is not controlled by this policy (another
	// policy's, or labelled by hand); it is never written or deleted.
	foreign bool
	// view is the mode the ConfigMap shows keys in (AnnotationKeyNames):
	// Plain, or a view whose raw data is in the raw routing Secret.
	view keynames.Mode
}

// decided is the table the previous decision produced, which the next one
// starts from (its split generations in particular).
// In Observe mode that is the unpublished decision kept in the state; after a
// switch to Enforce, only what was published counts, so that a generation
// never published cannot take effect without its announcement.
func (p *published) decided(mode v1alpha1.PolicyMode) *routing.Table {
	if mode != v1alpha1.ModeEnforce {
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
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: policy.Namespace, Name: routingName(policy)}, cm)
	if apierrors.IsNotFound(err) {
		return newPublished(policy.Status.RoutingVersion, nil, routingDoc{}), nil
	}
	if err != nil {
		return nil, fmt.Errorf("get routing ConfigMap: %w", err)
	}
	key := client.ObjectKeyFromObject(policy)
	var doc routingDoc
	var ok bool
	r.mem.with(key, func(m *policyMemory) { doc, ok = m.parsed.at(cm.ResourceVersion) })
	view := keynames.Effective(keynames.Mode(cm.Annotations[AnnotationKeyNames]), "")
	if !ok {
		data := cm.Data
		if view != keynames.Plain && ownedBy(cm, policy) {
			// A view: the raw table and state are in the manager's Secret.
			if data, err = r.loadRawRouting(ctx, policy); err != nil {
				return nil, err
			}
		}
		var tableErr, stateErr error
		doc, tableErr, stateErr = parseRouting(data)
		if view != keynames.Plain && doc.tableVersion != viewVersion(cm.Data) {
			// The Secret was written and the ConfigMap not (its write
			// failed): publish both again, at the next version.
			doc.stale = true
		}
		if tableErr != nil {
			log.FromContext(ctx).Error(tableErr, "published routing table unreadable; starting over")
		}
		if stateErr != nil {
			log.FromContext(ctx).Error(stateErr, "manager state unreadable; hysteresis timers restart")
		}
		r.mem.with(key, func(m *policyMemory) { m.parsed = parsedEntry{rv: cm.ResourceVersion, doc: doc} })
	}
	pub := newPublished(policy.Status.RoutingVersion, cm, doc)
	pub.foreign = !ownedBy(cm, policy)
	pub.view = view
	return pub, nil
}

// routingDoc is the parsed data of a routing ConfigMap. parsedEntry shares
// it between passes: decisions never mutate it.
type routingDoc struct {
	table *routing.Table // nil when absent or unreadable
	// tableVersion is the table's version, read even from a table too
	// broken to use: the next one must still be greater.
	tableVersion int64
	state        decide.State
	observe      []routing.Entry
	// durable is durableJSON of the state as the ConfigMap holds it, even
	// when state and observe come from memory.
	durable string
	// tableJSON is the raw table as written (the ConfigMap's, or the raw
	// routing Secret's).
	tableJSON string
	// stale: the ConfigMap's view is not of this table (see loadPublished).
	stale bool
}

// parseRouting parses a routing ConfigMap's data. A table or state that
// cannot be read is left out and its error returned, so the caller can say
// so; the version of a table that is JSON but invalid is kept.
func parseRouting(data map[string]string) (doc routingDoc, tableErr, stateErr error) {
	if raw := data[routing.ConfigMapKey]; raw != "" {
		doc.tableJSON = raw
		doc.table, tableErr = routing.Parse([]byte(raw))
		if tableErr == nil {
			doc.tableVersion = doc.table.Version
		} else {
			var v struct {
				Version int64 `json:"version"`
			}
			_ = json.Unmarshal([]byte(raw), &v)
			doc.tableVersion = v.Version
		}
	}
	if raw := data[StateKey]; raw != "" {
		var sd stateDoc
		if stateErr = json.Unmarshal([]byte(raw), &sd); stateErr == nil {
			// Only the durable part: timers a ConfigMap may hold (written by
			// an earlier version) are as old as that write; trusted now they
			// could make a key hot without its sustainFor.
			doc.state = decide.State{Keys: sd.Keys}.Durable()
			doc.observe = sd.Observed
			doc.durable, stateErr = durableJSON(sd)
		}
	}
	return doc, tableErr, stateErr
}

// newPublished is what the routing ConfigMap cm (nil if there is none),
// parsed as doc, holds for a policy whose status says statusVersion. Its
// Version is the greater of the table's and statusVersion, so a table
// deleted by hand, or a status write that was lost, never sends the version
// back.
func newPublished(statusVersion int64, cm *corev1.ConfigMap, doc routingDoc) *published {
	p := &published{Version: max(statusVersion, doc.tableVersion), Table: doc.table, State: doc.state, Observe: doc.observe}
	if cm != nil {
		p.exists = true
		p.held = controllerutil.ContainsFinalizer(cm, Finalizer)
		p.terminating = !cm.DeletionTimestamp.IsZero()
		p.tableJSON, p.durableJSON, p.rv = doc.tableJSON, doc.durable, cm.ResourceVersion
		if doc.stale {
			p.tableJSON = ""
		}
	}
	return p
}

// parsedEntry is the last parsed routing ConfigMap of a policy, by
// resourceVersion (policyMemory.parsed): a 1,000-entry table costs
// milliseconds to parse and validate, and most passes find it unchanged. It
// is also the leader's memory of the state, timers included: a pass that
// writes the ConfigMap puts what it wrote under the new resourceVersion with
// its full state, and a pass that writes nothing remembers its state over
// the entry's (remember), so the next pass continues the timers either way.
type parsedEntry struct {
	rv  string
	doc routingDoc
}

// at is the parsed ConfigMap of resourceVersion rv, if that is the one
// remembered.
func (e parsedEntry) at(rv string) (routingDoc, bool) {
	if e.rv != rv || rv == "" {
		return routingDoc{}, false
	}
	return e.doc, true
}

// remember replaces the entry's state with a pass's newer one, if the entry
// is still that of resourceVersion rv (a pass that found the ConfigMap
// changed since starts from what it holds).
func (e *parsedEntry) remember(rv string, state decide.State, observe []routing.Entry) {
	if e.rv != rv || rv == "" {
		return
	}
	e.doc.state, e.doc.observe = state, observe
}

// publishResult says what publish did.
type publishResult struct {
	version int64
	// table is the routing.json in force after the pass (written or
	// unchanged), and keys its keys: the hub pushes it to node agents.
	table string
	keys  []string
	wrote bool
	err   error
	// draining counts the split keys published in Observe mode: splits from
	// before the switch, published until folded.
	draining int
}

// routingContent is the data the routing ConfigMap must hold after a pass.
type routingContent struct {
	tableJSON string
	// doc is the pass's state, timers included, and table parsed, for the
	// leader's memory; doc.durable is the state the ConfigMap holds.
	doc     routingDoc
	version int64
	// draining: see publishResult.
	draining int
}

// newRoutingContent computes the routing ConfigMap's data. The table holds
// enforced's entries; in Observe mode those are only the splits still
// draining, and the decided entries (out) go to the state. The table's
// version is prev's, plus one if its bytes change (see versioned).
func newRoutingContent(policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, prev *published, out, enforced *decide.Output) (routingContent, error) {
	entries := []routing.Entry{}
	doc := stateDoc{Keys: out.State.Keys}
	if spec.Mode != v1alpha1.ModeEnforce {
		doc.Observed = out.Entries
		if doc.Observed == nil {
			doc.Observed = []routing.Entry{}
		}
	}
	if enforced.Entries != nil {
		entries = enforced.Entries
	}
	t := &routing.Table{
		SchemaVersion: routing.SchemaVersionFor(spec.Target.Database),
		Policy:        policy.Namespace + "/" + policy.Name,
		Database:      spec.Target.Database,
		EpochMillis:   spec.Mitigations.Split.Epoch.Milliseconds(),
		Entries:       entries,
		LocalCache:    cacheSettings(&spec.Mitigations.LocalCache),
		Replicas:      replicaSettings(&spec.Mitigations.ReplicaReads),
	}
	tableJSON, err := versioned(t, prev)
	if err != nil {
		return routingContent{}, fmt.Errorf("routing table: %w", err)
	}
	durable, err := durableJSON(doc)
	if err != nil {
		return routingContent{}, err
	}
	c := routingContent{tableJSON: string(tableJSON), version: t.Version,
		doc: routingDoc{table: t, tableJSON: string(tableJSON), tableVersion: t.Version, state: out.State, observe: doc.Observed, durable: durable}}
	if spec.Mode != v1alpha1.ModeEnforce {
		c.draining = len(entries)
	}
	return c, nil
}

// cacheSettings are the table-wide settings of every reader's local cache:
// the policy's bounds and tracking, nil when the policy does not allow local
// caching (no entry then asks a reader to cache).
func cacheSettings(c *v1alpha1.LocalCache) *routing.CacheSettings {
	if !c.IsEnabled() {
		return nil
	}
	return &routing.CacheSettings{Tracking: c.Tracking, MaxEntries: int64(c.MaxEntries), MaxBytes: c.MaxBytes}
}

// replicaSettings are the table-wide settings of replica reads, nil when
// the policy does not allow them.
func replicaSettings(r *v1alpha1.ReplicaReads) *routing.ReplicaSettings {
	if !r.IsEnabled() {
		return nil
	}
	check := r.LagCheckInterval.Duration
	if check <= 0 {
		check = v1alpha1.DefaultLagCheckInterval
	}
	return &routing.ReplicaSettings{Addresses: r.Addresses, CheckMillis: check.Milliseconds()}
}

// versioned sets t's version and serialises it. Same entries and epoch
// length serialise to the same bytes at the same version, so t is first
// serialised at prev.Version (the greatest version ever published) and
// keeps it if those are the bytes already published; otherwise (or when no
// readable table or no version was ever published) it takes the next
// version. The version thus grows by one at each change and never goes
// back.
func versioned(t *routing.Table, prev *published) ([]byte, error) {
	t.Version = prev.Version
	b, err := t.Marshal()
	if err != nil {
		return nil, err
	}
	if prev.Table != nil && prev.Version != 0 && string(b) == prev.tableJSON {
		return b, nil
	}
	t.Version = prev.Version + 1
	return t.Marshal()
}

// durableJSON serialises what of a state document must be written when it
// changes: the durable part of the key states and the Observe-mode entries.
func durableJSON(doc stateDoc) (string, error) {
	b, err := json.Marshal(stateDoc{Keys: decide.State{Keys: doc.Keys}.Durable().Keys, Observed: doc.Observed})
	return string(b), err
}

// unchanged reports whether the routing ConfigMap already holds c's table,
// the durable part of its state and the finalizer, so that nothing needs
// writing: a timer set or cleared alone stays in the leader's memory.
func (c routingContent) unchanged(prev *published, view keynames.Mode) bool {
	return prev.exists && prev.held && c.tableJSON == prev.tableJSON && c.doc.durable == prev.durableJSON && keynames.Effective(prev.view, "") == view
}

// publish writes the routing ConfigMap (see newRoutingContent) with
// server-side apply, only when its table or the durable part of its state
// changes; otherwise the pass's state is remembered for the next pass.
func (r *HotKeyPolicyReconciler) publish(ctx context.Context, policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, prev *published, out, enforced *decide.Output) publishResult {
	if err := r.checkRoutingOwner(ctx, policy, prev); err != nil {
		return publishResult{version: prev.Version, err: err}
	}
	c, err := newRoutingContent(policy, spec, prev, out, enforced)
	if err != nil {
		return publishResult{version: prev.Version, err: err}
	}
	keys := make([]string, len(enforced.Entries))
	for i, e := range enforced.Entries {
		keys[i] = e.Key
	}
	names := r.namer(policy, spec)
	if c.unchanged(prev, names.Mode()) {
		r.mem.with(client.ObjectKeyFromObject(policy), func(m *policyMemory) { m.parsed.remember(prev.rv, c.doc.state, c.doc.observe) })
		return publishResult{version: c.version, table: c.tableJSON, keys: keys, draining: c.draining}
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
		WithFinalizers(Finalizer)
	data := map[string]string{routing.ConfigMapKey: c.tableJSON, StateKey: c.doc.durable}
	if names.Hides() {
		// The raw data first: a view never shows a table the Secret does
		// not hold (loadPublished republishes a view left behind).
		if err := r.storeRawRouting(ctx, policy, data); err != nil {
			return publishResult{version: prev.Version, err: err}
		}
		view, err := tableView(c.doc.table, names)
		if err != nil {
			return publishResult{version: prev.Version, err: fmt.Errorf("routing table view: %w", err)}
		}
		data = map[string]string{routing.ConfigMapKey: view}
		ac.WithAnnotations(map[string]string{AnnotationKeyNames: string(names.Mode())})
	}
	ac.WithData(data)
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return publishResult{version: prev.Version, err: fmt.Errorf("apply routing ConfigMap: %w", err)}
	}
	if !names.Hides() && keynames.Effective(prev.view, "") != keynames.Plain {
		// Plain again: the ConfigMap holds the raw data now.
		if err := r.deleteRawRouting(ctx, policy); err != nil {
			log.FromContext(ctx).Error(err, "raw routing Secret left behind")
		}
	}
	if ac.ResourceVersion != nil { // the applied object, as the API server returned it
		r.mem.with(client.ObjectKeyFromObject(policy), func(m *policyMemory) { m.parsed = parsedEntry{rv: *ac.ResourceVersion, doc: c.doc} })
	}
	if c.version != prev.Version {
		r.Metrics.publications.Inc()
	}
	return publishResult{version: c.version, table: c.tableJSON, keys: keys, wrote: true, draining: c.draining}
}
