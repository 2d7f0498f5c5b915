package controllers

import (
	"context"
	"crypto/tls"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/dataplane/sentinel"
)

// A Sentinel target's nodes by address. The manager's FailoverClient
// (DialRedis) follows the master, but names itself "FailoverClient", not
// the master it reaches: sampled through it, the learned capacity's shard
// had that name in status and metrics, and capturing node agents had no
// address to count (docs/capture.md). So each capacity sample asks the
// Sentinels for the master and its replicas, samples the master by its
// address, and the nodes' addresses are the policy's capture endpoints.

// sentinelNodes asks sn's Sentinels for the master's address and its
// usable replicas', sorted, as the sidecar does (dataplane/sentinel.Lookup):
// the highest configuration epoch wins and the master confirms its ROLE.
func sentinelNodes(ctx context.Context, sn v1alpha1.RedisSentinel, tc *tls.Config, creds Credentials) (master string, replicas []string, err error) {
	return sentinel.Lookup(ctx, sentinel.Options{
		Addrs: sn.Addresses, MasterName: sn.MasterName,
		Username: creds.SentinelUsername, Password: creds.SentinelPassword,
		DataUsername: creds.Username, DataPassword: creds.Password,
		TLS: tc, Timeout: redisOpTimeout,
	})
}
