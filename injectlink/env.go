package injectlink

// The sidecar's environment variables. Each is also a flag of `heatsink
// sidecar` (the flag wins when both are given); the flag's help names the
// variable. Names lists them all.
const (
	// EnvPolicy is the HotKeyPolicy whose routing table the sidecar follows.
	EnvPolicy = "HEATSINK_POLICY"
	// EnvNamespace is the policy's namespace (the pod's, a fieldRef).
	EnvNamespace = "HEATSINK_NAMESPACE"
	// EnvNodeIP is the node's address (status.hostIP): not read by the
	// sidecar, only referenced by EnvNodeAgent's default value.
	EnvNodeIP = "HEATSINK_NODE_IP"
	// EnvNodeAgent is the node agent's host:port (sidecarlink.DefaultPort
	// on the node unless the installer names a Service).
	EnvNodeAgent = "HEATSINK_NODE_AGENT"
	// EnvUpstream is the comma-separated Redis addresses (a cluster's
	// seeds); empty for a Sentinel target.
	EnvUpstream = "HEATSINK_UPSTREAM"
	// EnvCluster is "true" when the target is a Redis Cluster.
	EnvCluster = "HEATSINK_CLUSTER"
	// EnvSentinelAddresses is the comma-separated Sentinels of a Sentinel
	// target, EnvSentinelMaster the name they monitor the master under.
	EnvSentinelAddresses = "HEATSINK_SENTINEL_ADDRESSES"
	EnvSentinelMaster    = "HEATSINK_SENTINEL_MASTER"
	// The Sentinels' own credentials: files (set by the injector, mounted
	// at SentinelCredentialsMountPath) or values (by hand).
	EnvSentinelUsernameFile = "HEATSINK_SENTINEL_USERNAME_FILE"
	EnvSentinelPasswordFile = "HEATSINK_SENTINEL_PASSWORD_FILE"
	EnvSentinelUsername     = "HEATSINK_SENTINEL_USERNAME"
	EnvSentinelPassword     = "HEATSINK_SENTINEL_PASSWORD"
	// Redis' credentials: files (set by the injector, mounted at
	// CredentialsMountPath) or values (by hand).
	EnvRedisUsernameFile = "HEATSINK_REDIS_USERNAME_FILE"
	EnvRedisPasswordFile = "HEATSINK_REDIS_PASSWORD_FILE"
	EnvRedisUsername     = "HEATSINK_REDIS_USERNAME"
	EnvRedisPassword     = "HEATSINK_REDIS_PASSWORD"
	// EnvRoutingFile is the mounted routing table (RoutingFile) or empty
	// for none; the injector always sets it, because the sidecar's default
	// is RoutingFile.
	EnvRoutingFile = "HEATSINK_ROUTING_FILE"
	// TLS to Redis: EnvTLS "true" turns it on; the CA bundle (mounted at
	// TLSMountPath), the name to verify, the client certificate and key
	// (mounted at ClientCertMountPath).
	EnvTLS                   = "HEATSINK_TLS"
	EnvTLSCAFile             = "HEATSINK_TLS_CA_FILE"
	EnvTLSServerName         = "HEATSINK_TLS_SERVER_NAME"
	EnvTLSCertFile           = "HEATSINK_TLS_CERT_FILE"
	EnvTLSKeyFile            = "HEATSINK_TLS_KEY_FILE"
	EnvTLSInsecureSkipVerify = "HEATSINK_TLS_INSECURE_SKIP_VERIFY"
	// EnvListen is the application's address (Listen), EnvHTTPAddress the
	// metrics' and probes' (HTTPAddress).
	EnvListen      = "HEATSINK_LISTEN"
	EnvHTTPAddress = "HEATSINK_HTTP_ADDRESS"
	// EnvStartupWait is how long the sidecar holds its clients for the
	// routing table in force (StartupWait), as a Go duration.
	EnvStartupWait = "HEATSINK_STARTUP_WAIT"
	// Tuning the injector leaves at the sidecar's defaults.
	EnvMaxBulk      = "HEATSINK_MAX_BULK"
	EnvNoEventLoop  = "HEATSINK_NO_EVENT_LOOP"
	EnvReplyTimeout = "HEATSINK_REPLY_TIMEOUT"
	EnvMaxMemory    = "HEATSINK_MAX_MEMORY"
)

// Names is every variable above (TestNamesListsEveryConstant keeps it so).
var Names = []string{
	EnvPolicy, EnvNamespace, EnvNodeIP, EnvNodeAgent, EnvUpstream, EnvCluster,
	EnvSentinelAddresses, EnvSentinelMaster,
	EnvSentinelUsernameFile, EnvSentinelPasswordFile, EnvSentinelUsername, EnvSentinelPassword,
	EnvRedisUsernameFile, EnvRedisPasswordFile, EnvRedisUsername, EnvRedisPassword,
	EnvRoutingFile,
	EnvTLS, EnvTLSCAFile, EnvTLSServerName, EnvTLSCertFile, EnvTLSKeyFile, EnvTLSInsecureSkipVerify,
	EnvListen, EnvHTTPAddress, EnvStartupWait,
	EnvMaxBulk, EnvNoEventLoop, EnvReplyTimeout, EnvMaxMemory,
}

// Ref is a reference to variable name in another variable's value, which
// the kubelet expands when name is defined before it in the container's env.
func Ref(name string) string { return "$(" + name + ")" }
