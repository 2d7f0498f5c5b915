package endpoints

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestParse(t *testing.T) {
	shop := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "shop", Name: name} }
	for addr, want := range map[string]*Ref{
		"redis:6379":                                 {Service: shop("redis"), Port: 6379},
		"redis.shop:6379":                            {Service: shop("redis"), Port: 6379},
		"redis.data:6379":                            {Service: types.NamespacedName{Namespace: "data", Name: "redis"}, Port: 6379},
		"redis.shop.svc:6379":                        {Service: shop("redis"), Port: 6379},
		"redis.shop.svc.cluster.local:6379":          {Service: shop("redis"), Port: 6379},
		"Redis.Shop.SVC.cluster.local.:6380":         {Service: shop("redis"), Port: 6380},
		"redis-0.redis.shop.svc.cluster.local:6379":  {Service: shop("redis"), Hostname: "redis-0", Port: 6379},
		"redis-0.redis.shop.svc:6379":                {Service: shop("redis"), Hostname: "redis-0", Port: 6379},
		"10.0.0.1:6379":                              nil,
		"[fd00::1]:6379":                             nil,
		"redis.example.com:6379":                     nil,
		"a.b.c.d.example.com:6379":                   nil,
		"redis:0":                                    nil,
		"redis:http":                                 nil,
		"redis":                                      nil,
		"redis..shop:6379":                           nil,
		"redis-0.redis.shop.svc.cluster.local:70000": nil,
	} {
		got, ok := Parse(addr, "shop")
		if want == nil {
			if ok {
				t.Errorf("Parse(%q) = %+v, want no Service", addr, got)
			}
			continue
		}
		if !ok || got != *want {
			t.Errorf("Parse(%q) = %+v %v, want %+v", addr, got, ok, *want)
		}
	}
}

// service builds a Service of namespace ns with clusterIPs (none:
// headless) and ports (port: target).
func service(ns, name string, clusterIPs []string, ports ...corev1.ServicePort) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Ports: ports}}
	if len(clusterIPs) == 0 {
		s.Spec.ClusterIP = corev1.ClusterIPNone
		s.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	} else {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = clusterIPs[0], clusterIPs
	}
	return s
}

func port(name string, p int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: p, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

type ep struct {
	ip       string
	ready    *bool
	hostname string
}

// slice builds an EndpointSlice of Service svc with ports (name: number)
// and endpoints.
func slice(ns, svc, name string, family discoveryv1.AddressType, ports map[string]int32, eps ...ep) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
	}
	for n, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(n), Port: ptr.To(p), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			d.Hostname = ptr.To(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, d)
	}
	return s
}

var (
	yes, no = ptr.To(true), ptr.To(false)
	v4, v6  = discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
)

func TestFor(t *testing.T) {
	// The policy's namespace is shop. redis: ClusterIP 10.96.0.10, Service
	// port 6379 named "redis" to the named targetPort "redis" (7000 on the
	// pods of one slice, 7001 on the other's), and a metrics port. Its
	// slices hold a not-ready pod, a pod whose readiness is not set (ready)
	// and an FQDN slice. cache: headless, StatefulSet pods with hostnames.
	// redis in data: another namespace. ext: ExternalName.
	services := []corev1.Service{
		service("shop", "redis", []string{"10.96.0.10"}, port("redis", 6379, intstr.FromString("redis")), port("metrics", 9121, intstr.FromInt32(9121))),
		service("shop", "cache", nil, port("redis", 6379, intstr.FromInt32(6379))),
		service("shop", "dual", []string{"10.96.0.20", "fd00:96::20"}, port("", 6379, intstr.FromInt32(6380))),
		service("data", "redis", []string{"10.96.1.10"}, port("", 6379, intstr.FromInt32(6379))),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "redis.example.com"}},
	}
	slices := []discoveryv1.EndpointSlice{
		slice("shop", "redis", "redis-a", v4, map[string]int32{"redis": 7000, "metrics": 9121},
			ep{ip: "10.1.0.2", ready: yes}, ep{ip: "10.1.0.1"}, ep{ip: "10.1.0.3", ready: no}),
		slice("shop", "redis", "redis-b", v4, map[string]int32{"redis": 7001}, ep{ip: "10.1.1.1", ready: yes}),
		slice("shop", "redis", "redis-fqdn", discoveryv1.AddressTypeFQDN, map[string]int32{"redis": 7000}, ep{ip: "redis.example.com", ready: yes}),
		slice("shop", "cache", "cache-a", v4, map[string]int32{"redis": 6379},
			ep{ip: "10.2.0.1", ready: yes, hostname: "cache-0"}, ep{ip: "10.2.0.2", ready: yes, hostname: "cache-1"}, ep{ip: "10.2.0.3", ready: no, hostname: "cache-2"}),
		slice("shop", "dual", "dual-4", v4, map[string]int32{"": 6380}, ep{ip: "10.3.0.1", ready: yes}),
		slice("shop", "dual", "dual-6", v6, map[string]int32{"": 6380}, ep{ip: "fd00:3::1", ready: yes}),
		slice("data", "redis", "redis-x", v4, map[string]int32{"": 6379}, ep{ip: "10.4.0.1", ready: yes}),
		// Another Service's slice in shop: never a Service's named here.
		slice("shop", "other", "other-a", v4, map[string]int32{"": 6379}, ep{ip: "10.9.0.1", ready: yes}),
	}
	redisEndpoints := []string{"10.96.0.10:6379", "10.1.0.1:7000", "10.1.0.2:7000", "10.1.1.1:7001"}
	for name, tc := range map[string]struct {
		addrs []string
		want  []string
	}{
		"FQDN":                       {[]string{"redis.shop.svc.cluster.local:6379"}, append([]string{"redis.shop.svc.cluster.local:6379"}, redisEndpoints...)},
		"svc":                        {[]string{"redis.shop.svc:6379"}, append([]string{"redis.shop.svc:6379"}, redisEndpoints...)},
		"namespace":                  {[]string{"redis.shop:6379"}, append([]string{"redis.shop:6379"}, redisEndpoints...)},
		"bare name":                  {[]string{"redis:6379"}, append([]string{"redis:6379"}, redisEndpoints...)},
		"two names, once":            {[]string{"redis:6379", "redis.shop.svc:6379"}, append([]string{"redis:6379", "redis.shop.svc:6379"}, redisEndpoints...)},
		"not a Service port":         {[]string{"redis:6380"}, []string{"redis:6380"}},
		"metrics port":               {[]string{"redis:9121"}, []string{"redis:9121", "10.96.0.10:9121", "10.1.0.1:9121", "10.1.0.2:9121"}},
		"headless":                   {[]string{"cache.shop.svc:6379"}, []string{"cache.shop.svc:6379", "10.2.0.1:6379", "10.2.0.2:6379"}},
		"headless, the port dialled": {[]string{"cache:6390"}, []string{"cache:6390", "10.2.0.1:6390", "10.2.0.2:6390"}},
		"StatefulSet pod":            {[]string{"cache-1.cache.shop.svc.cluster.local:6379"}, []string{"cache-1.cache.shop.svc.cluster.local:6379", "10.2.0.2:6379"}},
		"pod not ready":              {[]string{"cache-2.cache.shop.svc:6379"}, []string{"cache-2.cache.shop.svc:6379"}},
		"dual stack":                 {[]string{"dual:6379"}, []string{"dual:6379", "10.96.0.20:6379", "[fd00:96::20]:6379", "10.3.0.1:6380", "[fd00:3::1]:6380"}},
		"another namespace":          {[]string{"redis.data.svc:6379"}, []string{"redis.data.svc:6379", "10.96.1.10:6379", "10.4.0.1:6379"}},
		"ExternalName":               {[]string{"ext:6379"}, []string{"ext:6379"}},
		"no such Service":            {[]string{"nope.shop.svc:6379", "redis.example.com:6379"}, []string{"nope.shop.svc:6379", "redis.example.com:6379"}},
		"IP addresses":               {[]string{"10.1.0.1:7000", "10.0.0.9:6379"}, []string{"10.1.0.1:7000", "10.0.0.9:6379"}},
		"an IP also a pod":           {[]string{"10.1.0.1:7000", "redis:6379"}, []string{"10.1.0.1:7000", "redis:6379", "10.96.0.10:6379", "10.1.0.2:7000", "10.1.1.1:7001"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, dropped := For(tc.addrs, "shop", services, slices, 256)
			if d := cmp.Diff(tc.want, got); d != "" || dropped != 0 {
				t.Errorf("For(%v): dropped %d, (-want +got):\n%s", tc.addrs, dropped, d)
			}
		})
	}
}

// TestForCapsDeterministically: a Service with more ready pods than fit is
// cut at max, the addresses and ClusterIP kept, the same pods whatever the
// order the slices and their endpoints come in, and the rest counted.
func TestForCapsDeterministically(t *testing.T) {
	services := []corev1.Service{service("shop", "big", []string{"10.96.0.1"}, port("", 6379, intstr.FromInt32(6379)))}
	var eps []ep
	for i := range 300 {
		eps = append(eps, ep{ip: fmt.Sprintf("10.5.%d.%d", i/250, i%250+1), ready: yes})
	}
	build := func(r *rand.Rand) []discoveryv1.EndpointSlice {
		shuffled := append([]ep(nil), eps...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		// Three slices of 100, as the EndpointSlice controller cuts them.
		var out []discoveryv1.EndpointSlice
		for i := 0; i < len(shuffled); i += 100 {
			out = append(out, slice("shop", "big", fmt.Sprint("big-", i), v4, map[string]int32{"": 6379}, shuffled[i:i+100]...))
		}
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	addrs := []string{"big:6379", "10.0.0.9:6379"}
	first, dropped := For(addrs, "shop", services, build(rand.New(rand.NewPCG(1, 2))), 20)
	want := []string{"big:6379", "10.0.0.9:6379", "10.96.0.1:6379"}
	for i := 1; i <= 17; i++ {
		want = append(want, fmt.Sprintf("10.5.0.%d:6379", i))
	}
	if d := cmp.Diff(want, first); d != "" || dropped != 283 {
		t.Fatalf("dropped %d (want 283), endpoints (-want +got):\n%s", dropped, d)
	}
	for seed := range uint64(5) {
		got, d := For(addrs, "shop", services, build(rand.New(rand.NewPCG(seed, 7))), 20)
		if diff := cmp.Diff(first, got); diff != "" || d != dropped {
			t.Errorf("slices in another order (seed %d): dropped %d, endpoints (-first +got):\n%s", seed, d, diff)
		}
	}
}

func TestServices(t *testing.T) {
	got := Services([]string{"redis:6379", "redis.shop.svc.cluster.local:6380", "10.0.0.1:6379", "cache-0.cache.data.svc:6379", "redis.example.com:6379"}, "shop")
	want := []types.NamespacedName{{Namespace: "shop", Name: "redis"}, {Namespace: "data", Name: "cache"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Services (-want +got):\n%s", d)
	}
}
