package webhook

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// sentinelEnv is the sidecar's environment for a Sentinel target: the
// Sentinels and the master name (the sidecar finds the master and follows
// its failovers itself). The Sentinels' own credentials come as files, as
// Redis' do (mountSecrets).
func sentinelEnv(sn *v1alpha1.RedisSentinel) []corev1.EnvVar {
	if sn == nil {
		return nil
	}
	return []corev1.EnvVar{
		{Name: "HEATSINK_SENTINEL_ADDRESSES", Value: strings.Join(sn.Addresses, ",")},
		{Name: "HEATSINK_SENTINEL_MASTER", Value: sn.MasterName},
	}
}
