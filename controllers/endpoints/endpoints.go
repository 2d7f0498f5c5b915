// Package endpoints turns a policy's target addresses into the IP endpoints
// a capturing node agent filters on (docs/capture.md): when an address names
// a Kubernetes Service, the Service's ClusterIPs at the Service port and its
// ready pods at the port that Service port sends to, read from the Service
// and its EndpointSlices. It is pure: the manager reads those objects from
// its cache and calls For at every pass.
//
// Why the pods as well as the ClusterIP: the capture sees packets before
// any NAT on the node, so a client whose datapath translates the Service
// address at connect() (Cilium's socket load balancing) sends to a pod
// address, and a client of a headless Service or of a StatefulSet pod's
// DNS name connects to the pod directly; the agent's DNS lookup of the
// Service's name gives only the ClusterIP.
package endpoints

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Ref is what an address names: a Service, and for a pod's DNS name
// (<hostname>.<service>.<namespace>.svc...) the pod's hostname in it.
type Ref struct {
	Service  types.NamespacedName
	Hostname string
	Port     uint16
}

// Parse reads addr ("host:port") as a pod of the policy's namespace would
// resolve it, with the cluster's DNS search path (<namespace>.svc.<domain>,
// svc.<domain>): "name" is a Service of the policy's namespace, "name.ns",
// "name.ns.svc" and "name.ns.svc.<domain>" a Service of namespace ns, and
// "host.name.ns.svc[.<domain>]" the pod with that hostname behind Service
// name (a StatefulSet's pod with its headless Service). The cluster domain
// is not checked: "name.ns.svc.example.com" is taken for Service name of
// namespace ns too, which misleads only where both exist. An IP address, or
// a name of another shape, names no Service: ok is false.
func Parse(addr, namespace string) (ref Ref, ok bool) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return Ref{}, false
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return Ref{}, false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return Ref{}, false
	}
	labels := strings.Split(strings.ToLower(strings.TrimSuffix(host, ".")), ".")
	if slices.Contains(labels, "") {
		return Ref{}, false
	}
	ref.Port = uint16(port)
	switch {
	case len(labels) == 1:
		ref.Service = types.NamespacedName{Namespace: namespace, Name: labels[0]}
	case len(labels) == 2:
		ref.Service = types.NamespacedName{Namespace: labels[1], Name: labels[0]}
	case labels[2] == "svc":
		ref.Service = types.NamespacedName{Namespace: labels[1], Name: labels[0]}
	case len(labels) >= 4 && labels[3] == "svc":
		ref.Service = types.NamespacedName{Namespace: labels[2], Name: labels[1]}
		ref.Hostname = labels[0]
	default:
		return Ref{}, false
	}
	return ref, true
}

// Services lists the Services the addresses may name, each once, in order
// (what the manager reads, and indexes its policies by).
func Services(addrs []string, namespace string) []types.NamespacedName {
	var out []types.NamespacedName
	for _, a := range addrs {
		if r, ok := Parse(a, namespace); ok && !slices.Contains(out, r.Service) {
			out = append(out, r.Service)
		}
	}
	return out
}

// For is the endpoints of a policy whose target addresses are addrs, in its
// namespace: the addresses themselves, as given (the agent resolves the
// names, as without Services), then the ClusterIPs of the Services they
// name, at the Service port, then their ready pods' endpoints, at most max
// in all. services and epSlices are the objects read (more may be passed:
// those not named are ignored).
//
//   - A Service port is matched by the address's port (TCP). Its pods are
//     at the port of the EndpointSlice port of the same name, which is the
//     Service port's targetPort resolved per pod: a named targetPort may be
//     a different number on pods of different slices.
//   - A headless Service (clusterIP None) has no ClusterIP, and its
//     clients dial the pod addresses DNS gives them at the address's own
//     port: its pods are at that port, Service port or not.
//   - A pod's DNS name gives that pod only (the endpoint whose hostname it
//     is), at the address's port.
//   - An ExternalName Service, a Service port the address does not name and
//     an endpoint not ready (ready false: starting, failing its probe,
//     terminating) give nothing; a ready condition not set counts as ready,
//     as the API says.
//
// The pods' endpoints are sorted (IPv4 before IPv6, by address, then port)
// and cut at max after the addresses and ClusterIPs, which are never cut
// (16 addresses at most, by the CRD); dropped is how many were left out, so
// the cut is the same at every pass and can be reported.
func For(addrs []string, namespace string, services []corev1.Service, epSlices []discoveryv1.EndpointSlice, max int) (out []string, dropped int) {
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, a := range addrs {
		add(a)
	}
	var pods []netip.AddrPort
	for _, a := range addrs {
		ref, ok := Parse(a, namespace)
		if !ok {
			continue
		}
		svc := findService(services, ref.Service)
		if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		ips, eps := serviceEndpoints(svc, ref, slicesOf(epSlices, ref.Service))
		for _, ip := range ips {
			add(ip.String())
		}
		pods = append(pods, eps...)
	}
	sortAddrPorts(pods)
	for _, e := range pods {
		s := e.String()
		if seen[s] {
			continue
		}
		if len(out) >= max {
			dropped++
			continue
		}
		add(s)
	}
	return out, dropped
}

// serviceEndpoints is one address's ClusterIP endpoints and pod endpoints.
func serviceEndpoints(svc *corev1.Service, ref Ref, epSlices []discoveryv1.EndpointSlice) (cluster, pods []netip.AddrPort) {
	if ref.Hostname != "" {
		return nil, readyEndpoints(epSlices, ref.Hostname, func(*discoveryv1.EndpointSlice) (uint16, bool) { return ref.Port, true })
	}
	if headless(svc) {
		return nil, readyEndpoints(epSlices, "", func(*discoveryv1.EndpointSlice) (uint16, bool) { return ref.Port, true })
	}
	sp := servicePort(svc, ref.Port)
	if sp == nil {
		return nil, nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil {
			cluster = append(cluster, netip.AddrPortFrom(ip.Unmap(), ref.Port))
		}
	}
	return cluster, readyEndpoints(epSlices, "", func(sl *discoveryv1.EndpointSlice) (uint16, bool) {
		for _, p := range sl.Ports {
			if p.Port != nil && ptrOr(p.Name, "") == sp.Name && ptrOr(p.Protocol, corev1.ProtocolTCP) == corev1.ProtocolTCP &&
				*p.Port > 0 && *p.Port <= 65535 {
				return uint16(*p.Port), true
			}
		}
		return 0, false
	})
}

// readyEndpoints lists the first address of each ready endpoint of the
// slices (with hostname: only the endpoint of that hostname), at the port
// each slice's port function gives.
func readyEndpoints(epSlices []discoveryv1.EndpointSlice, hostname string, port func(*discoveryv1.EndpointSlice) (uint16, bool)) []netip.AddrPort {
	var out []netip.AddrPort
	for i := range epSlices {
		sl := &epSlices[i]
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		p, ok := port(sl)
		if !ok {
			continue
		}
		for _, e := range sl.Endpoints {
			if len(e.Addresses) == 0 || !ptrOr(e.Conditions.Ready, true) || (hostname != "" && ptrOr(e.Hostname, "") != hostname) {
				continue
			}
			// The EndpointSlice controller writes one address per
			// endpoint; kube-proxy uses the first.
			if ip, err := netip.ParseAddr(e.Addresses[0]); err == nil {
				out = append(out, netip.AddrPortFrom(ip.Unmap(), p))
			}
		}
	}
	return out
}

func headless(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP == corev1.ClusterIPNone || (svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0)
}

// servicePort is the Service's TCP port numbered port, nil if none.
func servicePort(svc *corev1.Service, port uint16) *corev1.ServicePort {
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		if sp.Port == int32(port) && cmp.Or(sp.Protocol, corev1.ProtocolTCP) == corev1.ProtocolTCP {
			return sp
		}
	}
	return nil
}

func findService(services []corev1.Service, n types.NamespacedName) *corev1.Service {
	for i := range services {
		if services[i].Namespace == n.Namespace && services[i].Name == n.Name {
			return &services[i]
		}
	}
	return nil
}

// slicesOf are the EndpointSlices of Service n (by the label the
// EndpointSlice controller sets, discoveryv1.LabelServiceName).
func slicesOf(all []discoveryv1.EndpointSlice, n types.NamespacedName) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, sl := range all {
		if sl.Namespace == n.Namespace && sl.Labels[discoveryv1.LabelServiceName] == n.Name {
			out = append(out, sl)
		}
	}
	return out
}

func sortAddrPorts(s []netip.AddrPort) {
	slices.SortFunc(s, func(a, b netip.AddrPort) int { return a.Compare(b) })
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
