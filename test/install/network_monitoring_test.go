package install

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// renders are the installs these tests read: the chart with values, and
// kustomize builds.
func renders(t *testing.T, tl tools) map[string][]*unstructured.Unstructured {
	t.Helper()
	out := map[string][]*unstructured.Unstructured{
		"helm/default":           objects(t, helmTemplate(t, tl, nil)),
		"helm/monitoring":        objects(t, helmTemplate(t, tl, valueSets["monitoring"])),
		"helm/capture":           objects(t, helmTemplate(t, tl, valueSets["node-agent-capture"])),
		"helm/hostport":          objects(t, helmTemplate(t, tl, valueSets["node-agent-hostport"])),
		"helm/no-network-policy": objects(t, helmTemplate(t, tl, []string{"--set", "networkPolicy.enabled=false"})),
		"kustomize/default":      objects(t, run(t, ".", tl.kubectl, "kustomize", filepath.Join(tl.root, "config", "default"))),
		"kustomize/documented":   objects(t, run(t, ".", tl.kubectl, "kustomize", documentedOverlay(t, tl.root))),
	}
	return out
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// TestServiceMonitorsKeepThePolicyNamespace: every ServiceMonitor the chart
// and kustomize ship keeps the scraped labels (honorLabels: the manager's
// and the node agents' series carry the policy's namespace, which would
// otherwise become exported_namespace, and the alerts, which promtool tests
// on series labelled so, would show the operator's namespace), and scrapes
// the manager with authorization from a Secret instead of the deprecated
// bearerTokenFile: a ServiceAccount token Secret rendered beside it, whose
// ServiceAccount is bound to the metrics-reader ClusterRole and nothing else.
func TestServiceMonitorsKeepThePolicyNamespace(t *testing.T) {
	tl := findTools(t)
	for name, objs := range renders(t, tl) {
		sms := ofKind(objs, "ServiceMonitor")
		if (name == "helm/monitoring" || name == "kustomize/documented") && len(sms) != 2 {
			t.Errorf("%s: %d ServiceMonitors, want 2", name, len(sms))
		}
		for _, sm := range sms {
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			for _, e := range eps {
				ep := e.(map[string]any)
				if ep["honorLabels"] != true {
					t.Errorf("%s: ServiceMonitor %s: honorLabels %v, want true (the policy's namespace label)", name, sm.GetName(), ep["honorLabels"])
				}
				if _, ok := ep["bearerTokenFile"]; ok {
					t.Errorf("%s: ServiceMonitor %s uses the deprecated bearerTokenFile", name, sm.GetName())
				}
				if ep["scheme"] != "https" {
					continue
				}
				secret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
				typ, _, _ := unstructured.NestedString(ep, "authorization", "type")
				if typ != "Bearer" || secret == "" {
					t.Errorf("%s: ServiceMonitor %s scrapes HTTPS without authorization from a Secret: %v", name, sm.GetName(), ep["authorization"])
					continue
				}
				checkScraperToken(t, name, objs, sm.GetNamespace(), secret)
			}
		}
	}
}

// checkScraperToken: secret is a ServiceAccount token Secret in namespace,
// and its ServiceAccount is bound to the metrics-reader ClusterRole only.
func checkScraperToken(t *testing.T, render string, objs []*unstructured.Unstructured, namespace, secret string) {
	t.Helper()
	var sa string
	for _, s := range ofKind(objs, "Secret") {
		if s.GetName() == secret && s.GetNamespace() == namespace {
			if typ, _, _ := unstructured.NestedString(s.Object, "type"); typ == "kubernetes.io/service-account-token" {
				sa = s.GetAnnotations()["kubernetes.io/service-account.name"]
			}
		}
	}
	if sa == "" {
		t.Errorf("%s: no ServiceAccount token Secret %s/%s for the ServiceMonitor", render, namespace, secret)
		return
	}
	var roles []string
	for _, b := range ofKind(objs, "ClusterRoleBinding") {
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		for _, s := range subjects {
			m := s.(map[string]any)
			if m["kind"] == "ServiceAccount" && m["name"] == sa && m["namespace"] == namespace {
				role, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
				roles = append(roles, role)
			}
		}
	}
	if len(roles) != 1 || !strings.HasSuffix(roles[0], "metrics-reader") {
		t.Errorf("%s: the scraper %s/%s is bound to %v, want the metrics-reader ClusterRole alone", render, namespace, sa, roles)
	}
}

// TestNetworkPolicies: the chart (unless networkPolicy.enabled=false) and
// config/default ship ingress NetworkPolicies for the manager (which serves
// the webhooks) and the node agents; each selects its workload's pods, names
// only ports those pods declare (with their protocol), keeps the webhook
// port open to the API server (whose address no selector matches), the
// fleet port to the node agents, and the agents' ingest and routing ports to
// injected pods only. With the capture (host network, which policies do not
// govern) the agents get none and the fleet port is open.
func TestNetworkPolicies(t *testing.T) {
	tl := findTools(t)
	for name, objs := range renders(t, tl) {
		nps := ofKind(objs, "NetworkPolicy")
		want := 2
		switch name {
		case "helm/no-network-policy":
			want = 0
		case "helm/capture":
			want = 1
		}
		if len(nps) != want {
			t.Errorf("%s: %d NetworkPolicies, want %d", name, len(nps), want)
		}
		for _, np := range nps {
			checkNetworkPolicy(t, name, objs, np)
		}
	}
}

// rule is one ingress rule: its ports ("name/PROTO") and whether it admits
// any source.
type rule struct {
	ports []string
	from  []any
}

func checkNetworkPolicy(t *testing.T, render string, objs []*unstructured.Unstructured, np *unstructured.Unstructured) {
	t.Helper()
	sel, _, _ := unstructured.NestedStringMap(np.Object, "spec", "podSelector", "matchLabels")
	var pods *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		matches := len(sel) > 0
		for k, v := range sel {
			matches = matches && labels[k] == v
		}
		if matches {
			if pods != nil {
				t.Errorf("%s: NetworkPolicy %s selects both %s and %s", render, np.GetName(), pods.GetName(), o.GetName())
			}
			pods = o
		}
	}
	if pods == nil {
		t.Errorf("%s: NetworkPolicy %s selects no workload (%v)", render, np.GetName(), sel)
		return
	}
	declared := map[string]bool{}
	containers, _, _ := unstructured.NestedSlice(pods.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
		for _, p := range ports {
			m := p.(map[string]any)
			declared[fmt.Sprintf("%v/%v", m["name"], m["protocol"])] = true
		}
	}
	if types, _, _ := unstructured.NestedStringSlice(np.Object, "spec", "policyTypes"); fmt.Sprint(types) != "[Ingress]" {
		t.Errorf("%s: NetworkPolicy %s policyTypes %v, want [Ingress]", render, np.GetName(), types)
	}
	rules := map[string]rule{}
	ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	for _, r := range ingress {
		m := r.(map[string]any)
		ports, _ := m["ports"].([]any)
		from, _ := m["from"].([]any)
		var names []string
		for _, p := range ports {
			pm := p.(map[string]any)
			port := fmt.Sprintf("%v/%v", pm["port"], pm["protocol"])
			if !declared[port] {
				t.Errorf("%s: NetworkPolicy %s admits port %s, which %s does not declare", render, np.GetName(), port, pods.GetName())
			}
			names = append(names, port)
		}
		for _, n := range names {
			rules[n] = rule{ports: names, from: from}
		}
	}
	component := sel["app.kubernetes.io/component"]
	capture := render == "helm/capture"
	switch component {
	case "manager":
		if r, ok := rules["webhook/TCP"]; !ok || len(r.from) != 0 {
			t.Errorf("%s: the manager's webhook port must admit the API server from anywhere: %+v", render, r)
		}
		r, ok := rules["fleet/TCP"]
		switch {
		case !ok:
			t.Errorf("%s: the manager's fleet port is closed to the node agents", render)
		case capture && len(r.from) != 0:
			t.Errorf("%s: with the capture the agents are on the host network: the fleet port must be open, not %v", render, r.from)
		case !capture && !strings.Contains(fmt.Sprint(r.from), "component:node-agent"):
			t.Errorf("%s: the manager's fleet port admits %v, want the node agents' pods", render, r.from)
		}
		if _, ok := rules["metrics/TCP"]; !ok {
			t.Errorf("%s: the manager's metrics port is closed", render)
		}
	case "node-agent":
		for _, p := range []string{"ingest/UDP", "routing/TCP"} {
			r, ok := rules[p]
			if !ok || len(r.from) != 1 || !strings.Contains(fmt.Sprint(r.from), "heatsink.dev/policy") || !strings.Contains(fmt.Sprint(r.from), "namespaceSelector:map[]") {
				t.Errorf("%s: the node agent's %s admits %+v, want injected pods (label heatsink.dev/policy) of every namespace", render, p, r)
			}
		}
		if _, ok := rules["metrics/TCP"]; !ok {
			t.Errorf("%s: the node agent's metrics port is closed", render)
		}
	default:
		t.Errorf("%s: NetworkPolicy %s for an unknown component %q", render, np.GetName(), component)
	}
}
