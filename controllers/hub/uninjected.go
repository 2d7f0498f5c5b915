package hub

import (
	"slices"
	"strings"
	"sync"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// Pods without the sidecar, for the node agents' packet capture
// (docs/capture.md). The capture attributes a connection by where it goes
// (a policy's endpoints), so such a pod may be counted for any policy of
// its namespace, and none other (entitlement, as for injected pods): the
// hub lists it to its node once per policy of its namespace, marked
// Uninjected, under the entry name "<namespace>/<pod>#<policy name>". A
// node hosting such a pod hosts the policy (it gets the directive, and its
// summaries are expected), as it does for an injected pod.

// uninjected is the hub's record of those pods. Its mutex is taken before
// the hub's (and never while holding it).
type uninjected struct {
	mu   sync.Mutex
	pods map[string]uninjectedPod // by "<namespace>/<name>"
	// listed are the policies each pod is listed for now.
	listed map[string][]string
}

type uninjectedPod struct{ node, ip string }

// UpsertUninjectedPod records a pod without the sidecar (name is
// "<namespace>/<name>"); one without a node or an address is removed.
func (h *Hub) UpsertUninjectedPod(name, nodeName, ip string) {
	u := &h.uninjected
	u.mu.Lock()
	defer u.mu.Unlock()
	if nodeName == "" || ip == "" {
		delete(u.pods, name)
		h.syncUninjectedLocked(name)
		return
	}
	if u.pods == nil {
		u.pods, u.listed = map[string]uninjectedPod{}, map[string][]string{}
	}
	u.pods[name] = uninjectedPod{node: nodeName, ip: ip}
	h.syncUninjectedLocked(name)
}

// DeleteUninjectedPod forgets a pod without the sidecar.
func (h *Hub) DeleteUninjectedPod(name string) { h.UpsertUninjectedPod(name, "", "") }

// syncUninjectedLocked lists pod name for the policies of its namespace
// now (none if it is gone). u.mu must be held, h.mu not.
func (h *Hub) syncUninjectedLocked(name string) {
	u := &h.uninjected
	ns, _, _ := strings.Cut(name, "/")
	pod, ok := u.pods[name]
	var want []string
	if ok {
		want = h.policiesIn(ns)
	}
	for _, id := range u.listed[name] {
		if !slices.Contains(want, id) {
			h.DeletePod(entryName(name, id))
		}
	}
	for _, id := range want {
		h.UpsertPod(entryName(name, id), pod.node, agentlink.Pod{IP: pod.ip, Policy: id, Uninjected: true})
	}
	if len(want) == 0 {
		delete(u.listed, name)
	} else {
		u.listed[name] = want
	}
}

// resyncNamespace lists the uninjected pods of ns again (its policies
// changed). h.mu must not be held.
func (h *Hub) resyncNamespace(ns string) {
	u := &h.uninjected
	u.mu.Lock()
	defer u.mu.Unlock()
	for name := range u.pods {
		if strings.HasPrefix(name, ns+"/") {
			h.syncUninjectedLocked(name)
		}
	}
	for name := range u.listed {
		if _, ok := u.pods[name]; !ok && strings.HasPrefix(name, ns+"/") {
			h.syncUninjectedLocked(name)
		}
	}
}

// policiesIn lists the ids of the policies of namespace ns the hub has
// parameters for, sorted.
func (h *Hub) policiesIn(ns string) []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []string
	for id, p := range h.policies {
		if p.hasParams && strings.HasPrefix(id, ns+"/") {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func entryName(pod, policy string) string {
	_, name, _ := strings.Cut(policy, "/")
	return pod + "#" + name
}
