package transparency

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/proxytest"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// startProxy serves a proxy in front of upstreams until the test ends.
func startProxy(t *testing.T, cfg proxy.Config) string {
	t.Helper()
	addr, _ := proxytest.Start(t, cfg)
	return addr
}

func clients(t *testing.T, addrs ...string) []*redis.Client {
	var out []*redis.Client
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// deployment is one Redis deployment with its three ways in: directly,
// through the proxy's event loop, and through sessions only.
type deployment struct {
	name    string
	cluster bool
	direct  target
	proxies []target
}

func deployments(t *testing.T) []deployment {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	s := redistest.Standalone(t)
	nodes := clients(t, s.Addr)
	sd := deployment{name: "standalone", direct: target{name: "direct", addr: s.Addr, nodes: nodes}}
	for _, noLoop := range []bool{false, true} {
		name := "proxy-loop"
		if noLoop {
			name = "proxy-sessions"
		}
		addr := startProxy(t, proxy.Config{Upstreams: []string{s.Addr}, NoEventLoop: noLoop})
		sd.proxies = append(sd.proxies, target{name: name, addr: addr, nodes: nodes})
	}

	c := redistest.Cluster(t)
	cnodes := clients(t, c.Addrs()...)
	// Directly, a scenario talks to the master of its keys' slot ({t}).
	owner := ""
	slot := int(routing.Slot("{t}"))
	for _, n := range cnodes {
		slots, err := n.ClusterSlots(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range slots {
			if r.Start <= slot && slot <= r.End {
				owner = r.Nodes[0].Addr
			}
		}
	}
	if owner == "" {
		t.Fatal("no master serves {t}")
	}
	cd := deployment{name: "cluster", cluster: true, direct: target{name: "direct", addr: owner, nodes: cnodes}}
	for _, noLoop := range []bool{false, true} {
		name := "proxy-loop"
		if noLoop {
			name = "proxy-sessions"
		}
		addr := startProxy(t, proxy.Config{Upstreams: c.Addrs()[:1], Cluster: true, NoEventLoop: noLoop})
		cd.proxies = append(cd.proxies, target{name: name, addr: addr, nodes: cnodes})
	}
	return []deployment{sd, cd}
}

// TestTransparency plays every scenario directly and through the proxy, in
// RESP2 and RESP3, on a standalone server and a 3-master cluster, and
// compares what every client received.
func TestTransparency(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			for _, sc := range scenarios {
				if sc.standaloneOnly && d.cluster || sc.clusterOnly && !d.cluster {
					continue
				}
				protos := []int{2, 3}
				if sc.fixedProto {
					protos = []int{2}
				}
				for _, proto := range protos {
					t.Run(fmt.Sprintf("%s/RESP%d", sc.name, proto), func(t *testing.T) {
						want := play(t, d.direct, sc, proto)
						for _, p := range d.proxies {
							if diff := diffTranscripts(want, play(t, p, sc, proto)); diff != "" {
								t.Errorf("%s differs from direct Redis:\n%s", p.name, diff)
							}
						}
					})
				}
			}
		})
	}
}
