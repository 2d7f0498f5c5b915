package injectlink

import (
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// Subcommand is the container's only argument: the image's entrypoint is
// the heatsink binary and `heatsink sidecar` the sidecar.
const Subcommand = "sidecar"

// What the sidecar serves, which the pod spec names: the application
// connects to Listen (the pod's loopback, so only its own containers
// reach it); HTTPAddress (HTTPPort, named HTTPPortName in the container's
// ports) serves /metrics and the probes, StartupPath the startup probe's.
const (
	Listen       = "127.0.0.1:6380"
	HTTPPort     = 9091
	HTTPAddress  = ":9091"
	HTTPPortName = "hs-proxy-http"
	StartupPath  = "/startupz"
)

// StartupWait is the sidecar's default --startup-wait and the wait the
// injector sets (EnvStartupWait) and sizes the startup probe for, one
// constant so that the probe and the wait cannot drift apart.
const StartupWait = 10 * time.Second

// MemoryLimit is the memory limit the injector gives the sidecar's
// container unless configured, and what the sidecar sizes its default
// memory ceiling from when it finds no cgroup limit.
const MemoryLimit = 256 << 20

// Where the injector mounts what the sidecar reads, and the files in them.
// Paths ending in "/" are directories; a file's path is the directory and
// its key (the Secret's or the ConfigMap's), as the kubelet lays it out.
const (
	// RoutingMountPath holds the policy's routing ConfigMap, RoutingFile
	// its table, the sidecar's default EnvRoutingFile.
	RoutingMountPath = "/etc/heatsink/routing"
	RoutingFile      = RoutingMountPath + "/" + routing.ConfigMapKey
	// TLSMountPath holds the CA Secret's CAKey.
	TLSMountPath = "/etc/heatsink/tls/"
	CAKey        = "ca.crt"
	// CredentialsMountPath holds Redis' credentials Secret,
	// SentinelCredentialsMountPath the Sentinels', both with UsernameKey
	// and PasswordKey.
	CredentialsMountPath         = "/etc/heatsink/credentials/"
	SentinelCredentialsMountPath = "/etc/heatsink/sentinel-credentials/"
	UsernameKey                  = "username"
	PasswordKey                  = "password"
	// ClientCertMountPath holds the kubernetes.io/tls client certificate
	// Secret (its keys are corev1.TLSCertKey and corev1.TLSPrivateKeyKey,
	// tls.crt and tls.key).
	ClientCertMountPath = "/etc/heatsink/tls-client/"
)
