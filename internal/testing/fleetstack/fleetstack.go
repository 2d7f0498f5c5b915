// Package fleetstack starts heatsink's control side in a test's process,
// real: a kube-apiserver and etcd, the manager (the HotKeyPolicy
// reconciler and its fleet server) and one node agent per named node,
// each connected to it. Test packages that put sidecars in front of real
// Redis (test/apps, test/clients) start one for the package.
package fleetstack

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/nodeagent"
)

// Agent is one node's agent: where its sidecars send counts and follow
// the routing table.
type Agent struct {
	Node    string
	Counts  string // its counts (UDP) address
	Routing string // its routing (TCP) address
}

// Fleet is a started control side; Stop stops it.
type Fleet struct {
	CP     *controlplane.ControlPlane
	Agents []Agent // in the order of the nodes given to Start
	Stop   func()
}

// Start starts the control side with namespace created and one node agent
// per node, every agent holding the hub's token. The manager's cache is
// the one cmd/heatsink gives it (heatsink's ConfigMaps, pods by
// PodCacheOptions). Every part is on this machine and a table reaches the
// sidecars within milliseconds, so a split is announced 1 s ahead of its
// epoch boundary. Policies may name their Redis by address, as an
// installer that enables raw addresses allows (targets.allowRawAddresses):
// which Redis a policy may reach is not what these tests are about.
func Start(namespace, token string, nodes ...string) (_ *Fleet, err error) {
	ctrllog.SetLogger(logr.Discard())
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return nil, err
	}
	f := &Fleet{CP: cp}
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	f.Stop = func() {
		cancel()
		for _, d := range done {
			<-d
		}
		_ = cp.Stop()
	}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	if err := cp.CreateNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	opts := cp.ManagerOptions()
	opts.Controller = ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}
	opts.Cache = cache.Options{ByObject: map[crclient.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{controllers.LabelManagedBy: "heatsink"})},
		&corev1.Pod{}:       controllers.PodCacheOptions(),
	}}
	mgr, err := ctrl.NewManager(cp.Config, opts)
	if err != nil {
		return nil, err
	}
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: token})
	if err != nil {
		return nil, err
	}
	r := &controllers.HotKeyPolicyReconciler{Margin: time.Second, Fleet: h, RedisTimeout: 5 * time.Second,
		SkipNameValidation: true, Metrics: controllers.NewMetrics(prometheus.NewRegistry()),
		Targets: targets.Options{AllowRawAddresses: true}}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	done = append(done, run(ctx, func(ctx context.Context) { _ = mgr.Start(ctx) }))
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	addr, err := h.Addr(actx)
	if err != nil {
		return nil, fmt.Errorf("fleet server: %w", err)
	}
	for _, node := range nodes {
		d, err := nodeagent.New(nodeagent.Options{NodeName: node, ListenAddr: "127.0.0.1:0", Manager: addr, Token: token,
			Registerer: prometheus.NewRegistry()})
		if err != nil {
			return nil, err
		}
		done = append(done, run(ctx, func(ctx context.Context) { _ = d.Run(ctx) }))
		if err := eventually.Poll(ctx, 30*time.Second, func() error {
			if !d.Stats().Connected {
				return fmt.Errorf("node agent %s is not connected to the manager", node)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		f.Agents = append(f.Agents, Agent{Node: node, Counts: d.Addr().String(), Routing: d.RoutingAddr().String()})
	}
	return f, nil
}

// run runs fn in a goroutine and returns the channel closed when it ends.
func run(ctx context.Context, fn func(context.Context)) chan struct{} {
	c := make(chan struct{})
	go func() { fn(ctx); close(c) }()
	return c
}
