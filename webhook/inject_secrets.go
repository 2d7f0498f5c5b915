package webhook

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/injectlink"
)

// The policy's credentials and client certificate Secrets reach the proxy
// as files, not environment variables: the kubelet updates a mounted
// Secret's files when the Secret changes (within its sync period, about a
// minute), and the proxy reads them at each new connection to Redis, so a
// rotated password or a renewed certificate applies without restarting the
// pod, while connections already open stay as they were authenticated. An
// environment variable is fixed for the life of the container.
const (
	// CredentialsVolumeName is the volume of the Secret named by
	// spec.target.credentialsSecretRef (keys username and password), mounted
	// at injectlink.CredentialsMountPath; the Sentinels' and the client
	// certificate's at their injectlink paths too.
	CredentialsVolumeName = "heatsink-credentials"
	// SentinelCredentialsVolumeName is the volume of the Secret named by
	// spec.target.sentinel.credentialsSecretRef (keys username and
	// password): the Sentinels' own credentials.
	SentinelCredentialsVolumeName = "heatsink-sentinel-credentials"
	// ClientCertVolumeName is the volume of the kubernetes.io/tls Secret
	// named by spec.target.tls.clientCertSecretRef (tls.crt and tls.key).
	ClientCertVolumeName = "heatsink-tls-client"
)

// mountSecrets mounts the policy's credentials and client certificate
// Secrets into the proxy container c and points it at the files.
func mountSecrets(pod *corev1.Pod, c *corev1.Container, policy *v1alpha1.HotKeyPolicy) {
	mount := func(volume, path, secret string, optional bool, keys ...string) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: path, ReadOnly: true})
		if hasVolume(pod, volume) {
			return
		}
		items := make([]corev1.KeyToPath, len(keys))
		for i, k := range keys {
			items[i] = corev1.KeyToPath{Key: k, Path: k}
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name: volume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: secret, Items: items, Optional: &optional,
			}},
		})
	}
	t := policy.Spec.Target
	if ref := t.CredentialsSecretRef; ref != nil && ref.Name != "" {
		// Optional, as the environment variables were: "username" may be
		// absent (the default user), and a missing Secret shows on the
		// policy (CredentialsMissing) rather than holding the pod in
		// ContainerCreating.
		mount(CredentialsVolumeName, injectlink.CredentialsMountPath, ref.Name, true, injectlink.UsernameKey, injectlink.PasswordKey)
		c.Env = append(c.Env,
			corev1.EnvVar{Name: injectlink.EnvRedisUsernameFile, Value: injectlink.CredentialsMountPath + injectlink.UsernameKey},
			corev1.EnvVar{Name: injectlink.EnvRedisPasswordFile, Value: injectlink.CredentialsMountPath + injectlink.PasswordKey},
		)
	}
	if sn := t.Sentinel; sn != nil && sn.CredentialsSecretRef != nil && sn.CredentialsSecretRef.Name != "" {
		// Optional for the same reasons; the Sentinels' password rotates
		// like Redis' (read at each new connection to a Sentinel).
		mount(SentinelCredentialsVolumeName, injectlink.SentinelCredentialsMountPath, sn.CredentialsSecretRef.Name, true, injectlink.UsernameKey, injectlink.PasswordKey)
		c.Env = append(c.Env,
			corev1.EnvVar{Name: injectlink.EnvSentinelUsernameFile, Value: injectlink.SentinelCredentialsMountPath + injectlink.UsernameKey},
			corev1.EnvVar{Name: injectlink.EnvSentinelPasswordFile, Value: injectlink.SentinelCredentialsMountPath + injectlink.PasswordKey},
		)
	}
	if t.TLS != nil && t.TLS.ClientCertSecretRef != nil && t.TLS.ClientCertSecretRef.Name != "" {
		// Not optional: a Redis that verifies clients refuses the proxy
		// without it, and a pod stuck in ContainerCreating names the
		// missing Secret.
		mount(ClientCertVolumeName, injectlink.ClientCertMountPath, t.TLS.ClientCertSecretRef.Name, false, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		c.Env = append(c.Env,
			corev1.EnvVar{Name: injectlink.EnvTLSCertFile, Value: injectlink.ClientCertMountPath + corev1.TLSCertKey},
			corev1.EnvVar{Name: injectlink.EnvTLSKeyFile, Value: injectlink.ClientCertMountPath + corev1.TLSPrivateKeyKey},
		)
	}
}
