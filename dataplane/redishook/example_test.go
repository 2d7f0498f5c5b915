package redishook_test

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/dataplane/watch"
)

// An application applies its policy's routing table in-process: the engine
// follows the published table and the hook routes the client's commands on
// mitigated keys through it.
func Example() {
	ctx := context.Background()

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"redis:6379"}})
	eng := engine.New(rdb, engine.Options{Tracking: true})
	defer eng.Close() // flushes pre-aggregated increments
	rdb.AddHook(redishook.New(eng))

	w, err := watch.New(watch.Options{
		// The node agent of the pod's node (the node agent DaemonSet's
		// Service with internalTrafficPolicy: Local): it serves the tables
		// the manager pushes, to pods injected for the policy, and the pod
		// needs no API credentials.
		Agent: "heatsink-node-agent.heatsink-system.svc:7946", Namespace: "shop", Policy: "checkout",
		File:    "/etc/heatsink/routing/routing.json", // the mounted ConfigMap, if any
		OnTable: eng.SetTable,
	})
	if err != nil {
		panic(err)
	}
	go func() { _ = w.Run(ctx) }()

	_ = rdb.Incr(ctx, "likes:post:42") // split if the table says so
}
