// Package injectlink is the contract between the injector (package webhook,
// which writes the sidecar container into a pod) and the sidecar it starts
// (`heatsink sidecar`, cmd/heatsink): the environment variables the one sets
// and the other reads, the paths where Secrets and the routing ConfigMap are
// mounted and the file names in them, and the ports and paths the sidecar
// serves that the pod spec names (the application's address, the probes').
// Both sides import it, as the node agent and the sidecars both import
// sidecarlink, so a name can only change on both sides at once.
//
// The injector speaks to the sidecar through its environment and mounted
// files only, never its command line: the container's args are Subcommand
// alone, and every flag of `heatsink sidecar` defaults to its variable here.
// Credentials and certificates come as files (the *File variables), never as
// values: the kubelet updates a mounted Secret's files when the Secret
// changes and the sidecar reads them at each new connection, so a rotated
// password applies without a restart, while a variable is fixed for the life
// of the container. The value variables (EnvRedisPassword,
// EnvSentinelPassword) exist for running the sidecar by hand; the injector
// never sets them. One name is also spelled outside Go: the Helm chart's
// node agent address (charts/heatsink/templates/_helpers.tpl) references
// EnvNodeIP, as the injector's default address does (Ref).
//
// What holds the two together is tested from both ends in cmd/heatsink
// (TestInjectedPodIsWhatTheSidecarReads: a pod the injector wrote, its
// environment resolved as the kubelet does, read by the sidecar's own flag
// parsing, gives the configuration the policy asked for, and every file it
// names lies in a volume the container mounts), and test/repo
// (TestHeatsinkVariablesOnlyInInjectlink: no Go string outside this package
// spells a variable's name).
package injectlink
