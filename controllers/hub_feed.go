package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/routing"
)

// The fleet side of the manager: it feeds the hub what the hub cannot learn
// from the node agents (which pods may send for which policy, the policies
// and their published tables after a failover) and turns the hub's triggers
// into reconciles.
//
// Injected pods are watched with one label-selected watch (the injector
// labels them heatsink.dev/policy), stripped to what the hub needs; that is
// the manager's only cost that grows with pods, and the node agents make no
// API call at all.
//
// Only list and watch: an injected pod may be in any namespace, and RBAC
// cannot select by label, so the watch is cluster-wide and its label
// selector is what keeps other pods out of the manager's memory (with
// --capture-pods every pod is the capture's concern). Reading one pod by
// name is only the manager's own (webhook/image.go), in its namespace.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups=heatsink.dev,resources=hotkeyreports,verbs=create;patch

// PodCacheOptions restricts the manager's pod cache to injected pods and
// keeps only what the hub reads of them (name, namespace, label, node,
// address, phase) and the version of their sidecar, so the cache costs
// little per pod.
func PodCacheOptions() cache.ByObject { return PodCacheOptionsFor(false) }

// PodCacheOptionsFor is PodCacheOptions, or with capture every pod (node
// agents that capture count pods without the sidecar, and need their
// addresses and namespaces: docs/capture.md). That watch grows with every
// pod of the cluster, which is why the capture is opt-in.
func PodCacheOptionsFor(capture bool) cache.ByObject {
	var sel labels.Selector
	if !capture {
		req, _ := labels.NewRequirement(v1alpha1.LabelPolicy, selection.Exists, nil)
		sel = labels.NewSelector().Add(*req)
	}
	return cache.ByObject{
		Label: sel,
		Transform: func(o any) (any, error) {
			p, ok := o.(*corev1.Pod)
			if !ok {
				return o, nil
			}
			return &corev1.Pod{
				TypeMeta:   p.TypeMeta,
				ObjectMeta: metaOnly(p),
				Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
				Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
			}, nil
		},
	}
}

func metaOnly(p *corev1.Pod) (m metav1.ObjectMeta) {
	m.Name, m.Namespace, m.UID, m.ResourceVersion = p.Name, p.Namespace, p.UID, p.ResourceVersion
	m.Labels = map[string]string{v1alpha1.LabelPolicy: p.Labels[v1alpha1.LabelPolicy]}
	if p.Labels[v1alpha1.LabelPolicy] != "" {
		// What status.sidecarVersions counts, computed here because the
		// cache drops the containers (hotkeypolicy_sidecars.go).
		m.Labels[v1alpha1.LabelSidecarVersion] = sidecarVersion(p)
	}
	m.DeletionTimestamp = p.DeletionTimestamp
	return m
}

// podToHub tells the hub where an injected pod's counts come from. Pods
// without an address yet, finished or on the host's network (their source
// address is the node's, shared by every host-network pod) send nothing the
// agent could attribute.
//
// With capture, a pod without the label (no sidecar) is told to the hub as
// uninjected, on the same conditions, for the policies of its namespace.
func podToHub(h *hub.Hub, p *corev1.Pod, capture bool) {
	name := p.Namespace + "/" + p.Name
	policy := p.Labels[v1alpha1.LabelPolicy]
	done := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	usable := !done && !p.Spec.HostNetwork && p.Status.PodIP != "" && p.Spec.NodeName != ""
	if capture && (policy != "" || !usable) {
		h.DeleteUninjectedPod(name)
	}
	if policy == "" || !usable {
		h.DeletePod(name)
		if capture && policy == "" && usable {
			h.UpsertUninjectedPod(name, p.Spec.NodeName, p.Status.PodIP)
		}
		return
	}
	h.UpsertPod(name, p.Spec.NodeName, agentlink.Pod{IP: p.Status.PodIP, Policy: p.Namespace + "/" + policy})
}

// setupFleet registers the pod feed, the hub's priming and its triggers.
func (r *HotKeyPolicyReconciler) setupFleet(ctx context.Context, mgr manager.Manager) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	pod := func(o any) *corev1.Pod {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		p, _ := o.(*corev1.Pod)
		return p
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { podToHub(r.Fleet, pod(o), r.CapturePods) },
		UpdateFunc: func(_, o any) { podToHub(r.Fleet, pod(o), r.CapturePods) },
		DeleteFunc: func(o any) {
			if p := pod(o); p != nil {
				r.Fleet.DeletePod(p.Namespace + "/" + p.Name)
				r.Fleet.DeleteUninjectedPod(p.Namespace + "/" + p.Name)
			}
		},
	}); err != nil {
		return err
	}
	r.Fleet.OnTrigger(func(id string) bool {
		ns, name, _ := strings.Cut(id, "/")
		p := &v1alpha1.HotKeyPolicy{}
		p.Namespace, p.Name = ns, name
		select {
		case r.triggers <- event.GenericEvent{Object: p}:
			return true
		default:
			return false
		}
	})
	r.Fleet.OnPrime(r.primeFleet)
	return nil
}

// primeFleet gives a newly elected manager's hub every policy and published
// table before node agents connect, so their snapshot names every policy
// (an agent forgets the policies a snapshot leaves out).
func (r *HotKeyPolicyReconciler) primeFleet(ctx context.Context) error {
	var policies v1alpha1.HotKeyPolicyList
	if err := r.Client.List(ctx, &policies); err != nil {
		return err
	}
	for i := range policies.Items {
		p := &policies.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		spec := p.Spec.DeepCopy()
		v1alpha1.SetDefaults(spec)
		id := policyID(client.ObjectKeyFromObject(p))
		r.Fleet.SetPolicy(id, hub.ParamsFromSpec(spec))
		prev, err := r.loadPublished(ctx, p)
		if err != nil || prev.Table == nil || prev.tableJSON == "" {
			continue // the policy's next pass publishes and pushes it
		}
		r.Fleet.SetRouting(id, prev.Table.Version, []byte(prev.tableJSON), tableKeys(prev.Table))
	}
	return nil
}

// tableKeys lists a table's keys (the hub pins them: their cooling is
// measured exactly).
func tableKeys(t *routing.Table) []string {
	if t == nil {
		return nil
	}
	out := make([]string, len(t.Entries))
	for i, e := range t.Entries {
		out[i] = e.Key
	}
	return out
}
