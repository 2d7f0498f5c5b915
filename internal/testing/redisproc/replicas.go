package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// StartClusterReplicas starts a Redis Cluster of masters masters with
// replicas replicas each (`redis-cli --cluster create --cluster-replicas`)
// and waits until every node reports cluster_state:ok and every replica's
// link to its master is up. Servers lists every node; which are masters is
// Redis' choice (ROLE, CLUSTER SHARDS say).
func StartClusterReplicas(ctx context.Context, masters, replicas int) (*Cluster, error) {
	return startCluster(ctx, masters, replicas)
}

// Replicated is a standalone master with replicas.
type Replicated struct {
	Master   *Server
	Replicas []*Server
}

// ReplicaAddrs are the replicas' addresses.
func (r *Replicated) ReplicaAddrs() []string { return addrs(r.Replicas) }

// StartReplicated starts a standalone master and replicas replicas of it
// (replicaof) and waits until every replica's link is up.
func StartReplicated(ctx context.Context, replicas int) (*Replicated, error) {
	m, err := Start(ctx, Options{})
	if err != nil {
		return nil, err
	}
	r := &Replicated{Master: m}
	for i := 0; i < replicas; i++ {
		s, err := Start(ctx, Options{ExtraArgs: []string{"--replicaof", "127.0.0.1", strconv.Itoa(m.Port)}})
		if err != nil {
			r.Stop()
			return nil, err
		}
		r.Replicas = append(r.Replicas, s)
	}
	if err := eventually.Poll(ctx, 30*time.Second, func() error { return replicasLinked(r.Replicas, replicas) }); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// Stop stops the replicas and the master.
func (r *Replicated) Stop() {
	for _, s := range r.Replicas {
		s.Stop()
	}
	r.Master.Stop()
}

// replicasLinked reports an error until want of servers are replicas whose
// link to their master is up.
func replicasLinked(servers []*Server, want int) error {
	if want == 0 {
		return nil
	}
	up := 0
	for _, s := range servers {
		info, err := Command(s.Addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("node %s: %w", s.Addr, err)
		}
		if strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
			up++
		}
	}
	if up < want {
		return fmt.Errorf("%d of %d replicas linked to their master", up, want)
	}
	return nil
}

// Command sends one command to addr and returns its first reply as text
// (a bulk string's content, or the first line of any other reply).
func Command(addr string, args ...string) (string, error) { return command(addr, args...) }

// clusterKnowsReplicas reports an error until every node's CLUSTER SLOTS
// lists want replicas: a node learns the others' roles and offsets by
// gossip, and until then leaves replicas out.
func clusterKnowsReplicas(servers []*Server, want int) error {
	if want == 0 {
		return nil
	}
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		slots, err := c.ClusterSlots(context.Background()).Result()
		c.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", s.Addr, err)
		}
		n := 0
		for _, sl := range slots {
			n += max(len(sl.Nodes)-1, 0)
		}
		if n < want {
			return fmt.Errorf("node %s lists %d of %d replicas", s.Addr, n, want)
		}
	}
	return nil
}
