package controllers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// A Sentinel target's nodes by address. The manager's FailoverClient
// (DialRedis) follows the master, but names itself "FailoverClient", not
// the master it reaches: sampled through it, the learned capacity's shard
// had that name in status and metrics, and capturing node agents had no
// address to count (docs/capture.md). So each capacity sample asks the
// Sentinels for the master and its replicas (two commands to one Sentinel,
// every capacity.DefaultInterval), samples the master by its address, and
// the nodes' addresses are the policy's capture endpoints.

// sentinelNodes asks sn's Sentinels, in order until one answers, for the
// master's address and its replicas' (those not down and not
// disconnected), sorted.
func sentinelNodes(ctx context.Context, sn v1alpha1.RedisSentinel, tc *tls.Config, creds Credentials) (master string, replicas []string, err error) {
	err = fmt.Errorf("sentinel: no Sentinel address for %q", sn.MasterName)
	for _, a := range sn.Addresses {
		c := redis.NewSentinelClient(&redis.Options{Addr: a, Username: creds.SentinelUsername, Password: creds.SentinelPassword,
			TLSConfig: tc, DialTimeout: redisOpTimeout, ReadTimeout: redisOpTimeout, WriteTimeout: redisOpTimeout, MaxRetries: -1})
		master, replicas, err = askSentinel(ctx, c, sn.MasterName)
		c.Close()
		if err == nil {
			return master, replicas, nil
		}
		err = fmt.Errorf("sentinel %s: %w", a, err)
	}
	return "", nil, err
}

func askSentinel(ctx context.Context, c *redis.SentinelClient, name string) (string, []string, error) {
	m, err := c.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", nil, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %w", name, err)
	}
	if len(m) != 2 {
		return "", nil, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %q", name, m)
	}
	rs, err := c.Replicas(ctx, name).Result()
	if err != nil {
		return "", nil, fmt.Errorf("SENTINEL REPLICAS %s: %w", name, err)
	}
	var replicas []string
	for _, r := range rs {
		if f := r["flags"]; strings.Contains(f, "s_down") || strings.Contains(f, "o_down") || strings.Contains(f, "disconnected") {
			continue
		}
		if r["ip"] != "" && r["port"] != "" {
			replicas = append(replicas, net.JoinHostPort(r["ip"], r["port"]))
		}
	}
	slices.Sort(replicas)
	return net.JoinHostPort(m[0], m[1]), replicas, nil
}
