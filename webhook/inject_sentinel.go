package webhook

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// sentinelEnv is the sidecar's environment for a Sentinel target: the
// Sentinels and the master name (the sidecar finds the master and follows
// its failovers itself), and the Sentinels' own credentials, read from
// their Secret by the kubelet (optional keys, as for the Redis
// credentials: a missing username means none).
func sentinelEnv(sn *v1alpha1.RedisSentinel) []corev1.EnvVar {
	if sn == nil {
		return nil
	}
	env := []corev1.EnvVar{
		{Name: "HEATSINK_SENTINEL_ADDRESSES", Value: strings.Join(sn.Addresses, ",")},
		{Name: "HEATSINK_SENTINEL_MASTER", Value: sn.MasterName},
	}
	if ref := sn.CredentialsSecretRef; ref != nil && ref.Name != "" {
		optional := true
		secretKey := func(key string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name},
				Key:                  key,
				Optional:             &optional,
			}}
		}
		env = append(env,
			corev1.EnvVar{Name: "HEATSINK_SENTINEL_USERNAME", ValueFrom: secretKey("username")},
			corev1.EnvVar{Name: "HEATSINK_SENTINEL_PASSWORD", ValueFrom: secretKey("password")},
		)
	}
	return env
}
