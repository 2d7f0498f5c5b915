package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/routing"
)

// Key names where people read them (docs/install.md, Who can read key
// names). A policy whose keys are not shown plain (spec.keyNames, or the
// installer's least, KeyNamesOptions.Least) has every key the manager
// writes into its status, HotKeyReport and Events named by a keynames.Namer,
// and its routing ConfigMap, which the namespace's `view` reads, holds only
// a view of the table with the keys so named (routing.ViewSchemaVersion: no
// reader applies it). The raw table and the manager's state, which a new
// leader needs to go on (split generations, folds), are kept in a Secret of
// the manager's namespace (rawRoutingName), which no namespace role reads;
// the sidecars get the raw table from their node agent, as they always do.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete,namespace=heatsink-system

// KeyNamesOptions are the installer's choices about key names.
type KeyNamesOptions struct {
	// Least is the mode every policy's keys are shown in at least (empty:
	// each policy's own).
	Least keynames.Mode
	// Key is the installation's HMAC key (cmd/heatsink keeps it in the
	// Secret --key-names-secret); each policy's is derived from it.
	Key []byte
	// Namespace is the manager's, where the raw routing Secrets are kept.
	Namespace string
}

// AnnotationKeyNames on a routing ConfigMap names the mode its view shows
// keys in; its raw table and state are then in the Secret rawRoutingName.
// Absent: the ConfigMap holds them itself (Plain).
const AnnotationKeyNames = "heatsink.dev/key-names"

// namer is how policy's keys are shown where people read them.
func (r *HotKeyPolicyReconciler) namer(policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec) *keynames.Namer {
	mode := keynames.Effective(keynames.Mode(spec.KeyNames), r.KeyNames.Least)
	return keynames.New(mode, keynames.PolicyKey(r.KeyNames.Key, policy.Namespace, policy.Name))
}

// rawRoutingName is the Secret, in the manager's namespace, that holds a
// policy's raw routing data when its ConfigMap holds a view: named by a
// hash of the policy's namespace and name (which together may be longer
// than a name can be), labelled with both.
func rawRoutingName(policy *v1alpha1.HotKeyPolicy) string {
	h := sha256.Sum256([]byte(policy.Namespace + "/" + policy.Name))
	return "heatsink-routing-" + hex.EncodeToString(h[:10])
}

func (r *HotKeyPolicyReconciler) rawRoutingKey(policy *v1alpha1.HotKeyPolicy) (client.ObjectKey, error) {
	if r.KeyNames.Namespace == "" {
		return client.ObjectKey{}, errors.New("key names are hidden but the manager's namespace is not known (--key-names-namespace or POD_NAMESPACE)")
	}
	return client.ObjectKey{Namespace: r.KeyNames.Namespace, Name: rawRoutingName(policy)}, nil
}

// loadRawRouting reads the raw routing data of policy (nil if there is
// none), uncached: the manager holds no cache of Secrets, and reads this
// one only when the ConfigMap changed since the pass that wrote it.
func (r *HotKeyPolicyReconciler) loadRawRouting(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (map[string]string, error) {
	key, err := r.rawRoutingKey(policy)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, key, s); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("get raw routing Secret: %w", err)
	}
	data := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		data[k] = string(v)
	}
	return data, nil
}

// storeRawRouting writes policy's raw routing data to its Secret.
func (r *HotKeyPolicyReconciler) storeRawRouting(ctx context.Context, policy *v1alpha1.HotKeyPolicy, data map[string]string) error {
	key, err := r.rawRoutingKey(policy)
	if err != nil {
		return err
	}
	bytes := make(map[string][]byte, len(data))
	for k, v := range data {
		bytes[k] = []byte(v)
	}
	s := &corev1.Secret{}
	err = r.APIReader.Get(ctx, key, s)
	switch {
	case apierrors.IsNotFound(err):
		s = &corev1.Secret{Data: bytes}
		s.Namespace, s.Name = key.Namespace, key.Name
		s.Labels = map[string]string{LabelManagedBy: "heatsink"}
		s.Annotations = map[string]string{"heatsink.dev/policy-namespace": policy.Namespace, "heatsink.dev/policy-name": policy.Name}
		err = r.Client.Create(ctx, s)
	case err == nil:
		s.Data = bytes
		err = r.Client.Update(ctx, s)
	}
	if err != nil {
		return fmt.Errorf("write raw routing Secret: %w", err)
	}
	return nil
}

// deleteRawRouting deletes policy's raw routing Secret, if any.
func (r *HotKeyPolicyReconciler) deleteRawRouting(ctx context.Context, policy *v1alpha1.HotKeyPolicy) error {
	key, err := r.rawRoutingKey(policy)
	if err != nil {
		return nil // no namespace: never written
	}
	s := &corev1.Secret{}
	s.Namespace, s.Name = key.Namespace, key.Name
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete raw routing Secret: %w", err)
	}
	return nil
}

// tableView is t with its keys shown by n, stamped
// routing.ViewSchemaVersion: what the routing ConfigMap holds for people
// (versions, moves, shard counts) when the keys are not shown plain.
func tableView(t *routing.Table, n *keynames.Namer) (string, error) {
	v := *t
	v.SchemaVersion = routing.ViewSchemaVersion
	v.Entries = make([]routing.Entry, len(t.Entries))
	for i, e := range t.Entries {
		e.Key = n.Name(e.Key)
		v.Entries[i] = e
	}
	slices.SortFunc(v.Entries, func(a, b routing.Entry) int { return strings.Compare(a.Key, b.Key) })
	b, err := json.Marshal(&v)
	return string(b), err
}

// viewVersion is the version a routing ConfigMap's view shows (0 if it
// holds none).
func viewVersion(data map[string]string) int64 {
	var v struct {
		Version int64 `json:"version"`
	}
	_ = json.Unmarshal([]byte(data[routing.ConfigMapKey]), &v)
	return v.Version
}

// namedCandidates are cands with their keys shown by n (cands itself when
// n shows keys plain).
func namedCandidates(cands []v1alpha1.Candidate, n *keynames.Namer) []v1alpha1.Candidate {
	if !n.Hides() {
		return cands
	}
	out := slices.Clone(cands)
	for i := range out {
		out[i].Key = n.Name(out[i].Key)
	}
	return out
}

// namedBigKeys are big with their keys shown by n.
func namedBigKeys(big []v1alpha1.BigKey, n *keynames.Namer) []v1alpha1.BigKey {
	if !n.Hides() {
		return big
	}
	out := slices.Clone(big)
	for i := range out {
		out[i].Key = n.Name(out[i].Key)
	}
	return out
}
