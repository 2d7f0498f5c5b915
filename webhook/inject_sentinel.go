package webhook

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/injectlink"
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
		{Name: injectlink.EnvSentinelAddresses, Value: strings.Join(sn.Addresses, ",")},
		{Name: injectlink.EnvSentinelMaster, Value: sn.MasterName},
	}
}
