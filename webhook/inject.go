package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/injectlink"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// The injection webhook is called only for pods that carry the annotation
// (matchConditions, evaluated by the API server), so an outage of the manager
// never blocks pods that did not ask for a sidecar, including the system's.
//
// failurePolicy=Fail: a pod that asked for the proxy talks Redis through
// 127.0.0.1:6380; admitted without it, it would start and fail at its first
// command, far from the cause. Refusing admission instead surfaces the cause
// on the ReplicaSet (FailedCreate) and the controller retries on its own.
//
// reinvocationPolicy=IfNeeded with an idempotent handler: if a later webhook
// changes the pod, heatsink sees it again and, finding its container, changes
// nothing.
//
// +kubebuilder:webhook:path=/mutate--v1-pod-heatsink-inject,mutating=true,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=inject.heatsink.dev,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded,timeoutSeconds=10,patch=`{"matchConditions":[{"name":"asks-for-heatsink","expression":"has(object.metadata.annotations) && 'heatsink.dev/inject' in object.metadata.annotations"}]}`
//
// The injector reads the policy the pod names. The self-managed webhook
// certificates (internal/certs) live in one Secret of the manager's namespace
// and the manager patches the caBundle of its own two webhook configurations;
// those rules are declared here because this package is where controller-gen
// looks for the webhooks' RBAC.
//
// +kubebuilder:rbac:groups=heatsink.dev,resources=hotkeypolicies,verbs=get
// (and what the policy's target names: package targets)
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;update,resourceNames=heatsink-mutating-webhook-configuration;heatsink-validating-webhook-configuration
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update,namespace=heatsink-system

const (
	// InjectAnnotation on a pod names the HotKeyPolicy, in the pod's
	// namespace, whose proxy sidecar the pod wants.
	InjectAnnotation = "heatsink.dev/inject"
	// InjectedAnnotation is set on a pod the webhook has injected, with the
	// policy name, so that tools can tell an injected pod at a glance.
	InjectedAnnotation = "heatsink.dev/injected"
	// ProxyContainerName is the name of the injected container.
	ProxyContainerName = "heatsink-proxy"
	// RoutingVolumeName is the volume holding the policy's routing ConfigMap,
	// mounted at injectlink.RoutingMountPath.
	RoutingVolumeName = "heatsink-routing"
	// TLSVolumeName is the volume of the CA Secret named by a policy's
	// spec.target.tls.caSecretRef, mounted read-only at
	// injectlink.TLSMountPath.
	TLSVolumeName = "heatsink-tls"
	// NoTokenVolumeName is an empty directory mounted over the proxy's
	// service account token path: the proxy gets routing tables from its
	// node agent and must hold no API credentials, whatever the pod's
	// automountServiceAccountToken says (the token is mounted into every
	// container that has nothing at that path).
	NoTokenVolumeName = "heatsink-no-api-token"
	// ServiceAccountTokenPath is where Kubernetes mounts a pod's API token.
	ServiceAccountTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// InjectPath is the path the injection webhook is served at.
	InjectPath = "/mutate--v1-pod-heatsink-inject"
	// proxyStartupPeriod and proxyStartupSlack make the startup probe: one
	// probe a second, so the application starts within a second of the
	// table; failing for injectlink.StartupWait plus the slack (the process's own
	// start, an image pulled slowly is not counted: the probe starts with
	// the container) before the kubelet restarts the proxy. The proxy
	// passes by itself at injectlink.StartupWait (the wait the injector
	// sets), so a restart means it is stuck.
	proxyStartupPeriod = time.Second
	proxyStartupSlack  = 20 * time.Second
)

// InjectorConfig is what the injected container looks like beyond what the
// policy decides.
type InjectorConfig struct {
	// Image is the heatsink image; the container runs `heatsink sidecar`.
	Image string
	// PullPolicy is the image pull policy; empty leaves the API default.
	PullPolicy corev1.PullPolicy
	// Resources are the proxy's requests and limits.
	Resources corev1.ResourceRequirements
	// NodeAgentAddress is the node agent the proxy sends its access counts
	// to (UDP) and reads routing tables from (TCP), injectlink.EnvNodeAgent: the
	// node agent Service with internalTrafficPolicy Local (e.g.
	// heatsink-node-agent.heatsink-system.svc:7946), which delivers only to
	// the agent on the sender's node. Empty means the agent's hostPort on the
	// pod's node, $(injectlink.EnvNodeIP):7946.
	NodeAgentAddress string
	// RoutingFile mounts the policy's routing ConfigMap into the pod as a
	// fallback for when the node agent is away. Off by default: each
	// node's kubelet then watches that ConfigMap through the API server, a
	// cost that grows with the nodes running the policy's pods.
	RoutingFile bool
	// KeyNamesLeast is the installer's least key-name mode: a policy whose
	// keys are not shown plain gets no routing file (see Inject).
	KeyNamesLeast keynames.Mode
	// Targets are the installer's target choices (raw addresses), as the
	// policy webhook and the manager apply them.
	Targets targets.Options
}

// DefaultProxyResources are the proxy's requests and limits unless configured:
// a RESP proxy with a bounded local cache. The memory limit is
// injectlink.MemoryLimit (256Mi), from which the sidecar's --max-memory
// defaults to 75 %; large values are streamed, so any value up to Redis' 512 MiB
// fits (docs/proxy.md, Memory defaults).
func DefaultProxyResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("500m"),
			corev1.ResourceMemory: *resource.NewQuantity(injectlink.MemoryLimit, resource.BinarySI),
		},
	}
}

// Injector is the admission handler that adds the proxy sidecar.
type Injector struct {
	// Reader reads policies; an uncached reader so that a policy applied
	// together with its Deployment (GitOps) is seen at once.
	Reader  client.Reader
	Decoder admission.Decoder
	Config  InjectorConfig
}

// SetupInjectionWebhook registers the sidecar injection webhook.
func SetupInjectionWebhook(mgr ctrl.Manager, cfg InjectorConfig) error {
	if cfg.Image == "" {
		return fmt.Errorf("sidecar injection: proxy image is empty")
	}
	mgr.GetWebhookServer().Register(InjectPath, &admission.Webhook{Handler: &Injector{
		Reader:  mgr.GetAPIReader(),
		Decoder: admission.NewDecoder(mgr.GetScheme()),
		Config:  cfg,
	}})
	return nil
}

// Handle implements admission.Handler.
func (in *Injector) Handle(ctx context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := in.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	policyName, ok := pod.Annotations[InjectAnnotation]
	if !ok || hasProxy(pod) {
		// Not asked for, or already injected (re-invocation): untouched.
		return admission.Allowed("")
	}
	if pod.Spec.HostNetwork {
		// Its 127.0.0.1:6380 would be the node's, shared with every other
		// host-network pod, and its counts would come from the node's
		// address, which the node agent cannot attribute to one pod.
		return admission.Denied(fmt.Sprintf("annotation %s: heatsink cannot inject a pod with hostNetwork: true (its proxy would listen on the node's loopback, and its counts could not be told apart from other host-network pods')", InjectAnnotation))
	}
	if msgs := validation.IsDNS1123Subdomain(policyName); len(msgs) > 0 {
		return admission.Denied(fmt.Sprintf("annotation %s=%q is not a HotKeyPolicy name: %s", InjectAnnotation, policyName, strings.Join(msgs, "; ")))
	}
	ns := pod.Namespace
	if ns == "" {
		ns = req.Namespace
	}
	policy := &v1alpha1.HotKeyPolicy{}
	if err := in.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: policyName}, policy); err != nil {
		if apierrors.IsNotFound(err) {
			// Refused rather than admitted bare: the pod would start
			// without its proxy and fail far from the cause. The
			// ReplicaSet retries, so creating the policy is the fix.
			return admission.Denied(fmt.Sprintf("annotation %s=%q: no HotKeyPolicy %q in namespace %q; create it (or remove the annotation) and the pod will be admitted", InjectAnnotation, policyName, policyName, ns))
		}
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("read HotKeyPolicy %s/%s: %w", ns, policyName, err))
	}
	// The sidecar connects where the manager does: the policy's target
	// resolved, and refused as admission and the manager refuse it (the
	// target may have stopped allowing the namespace since the policy was
	// admitted).
	tin, err := targets.Read(ctx, in.Reader, ns, &policy.Spec)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("read the target of HotKeyPolicy %s/%s: %w", ns, policyName, err))
	}
	resolved, refusal := targets.Resolve(&policy.Spec, tin, in.Config.Targets)
	if refusal != nil {
		return admission.Denied(fmt.Sprintf("annotation %s=%q: the policy's target is not allowed: %s", InjectAnnotation, policyName, refusal.Error()))
	}
	policy.Spec.Target = resolved
	mutated := pod.DeepCopy()
	Inject(mutated, policy, in.Config)
	raw, err := json.Marshal(mutated)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// hasProxy reports whether the pod already has the proxy, as a native sidecar
// or as a regular container (injected by hand or by an older version).
func hasProxy(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == ProxyContainerName {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == ProxyContainerName {
			return true
		}
	}
	return false
}

// Inject adds the proxy sidecar for policy to pod. It is a pure function and
// idempotent: a pod that has the proxy is left as it is.
//
// The proxy is a native sidecar (an init container with restartPolicy
// Always): the kubelet starts it before the application's containers, so
// their first connection to 127.0.0.1:6380 finds it, and it outlives them at
// shutdown, so their last commands still reach Redis. Jobs complete too.
func Inject(pod *corev1.Pod, policy *v1alpha1.HotKeyPolicy, cfg InjectorConfig) {
	if hasProxy(pod) {
		return
	}
	if keynames.Effective(keynames.Mode(policy.Spec.KeyNames), cfg.KeyNamesLeast) != keynames.Plain {
		// The routing ConfigMap of such a policy holds a view whose keys
		// are hashes, which the proxy refuses (routing.ViewSchemaVersion):
		// mounted, it would prove nothing and fall back to nothing. The
		// proxy waits for its node agent instead.
		cfg.RoutingFile = false
	}
	always := corev1.ContainerRestartPolicyAlways
	c := corev1.Container{
		Name:            ProxyContainerName,
		Image:           cfg.Image,
		ImagePullPolicy: cfg.PullPolicy,
		Args:            []string{injectlink.Subcommand},
		RestartPolicy:   &always,
		Env:             proxyEnv(policy, cfg),
		Ports: []corev1.ContainerPort{
			{Name: injectlink.HTTPPortName, ContainerPort: injectlink.HTTPPort, Protocol: corev1.ProtocolTCP},
		},
		Resources: *cfg.Resources.DeepCopy(),
		// The kubelet starts the application's containers once this probe
		// passes: the proxy then serves under the routing table in force
		// (or, past injectlink.StartupWait, without it, and says so).
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: injectlink.StartupPath, Port: intstr.FromString(injectlink.HTTPPortName)}},
			PeriodSeconds:    int32(proxyStartupPeriod / time.Second),
			FailureThreshold: int32((injectlink.StartupWait + proxyStartupSlack) / proxyStartupPeriod),
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: NoTokenVolumeName, MountPath: ServiceAccountTokenPath, ReadOnly: true},
		},
		SecurityContext: proxySecurityContext(),
	}
	if cfg.RoutingFile {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: RoutingVolumeName, MountPath: injectlink.RoutingMountPath, ReadOnly: true})
	}
	caSecret := ""
	if t := policy.Spec.Target.TLS; t != nil && t.CASecretRef != nil && t.CASecretRef.Name != "" {
		caSecret = t.CASecretRef.Name
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: TLSVolumeName, MountPath: injectlink.TLSMountPath, ReadOnly: true})
	}
	mountSecrets(pod, &c, policy)
	pod.Spec.InitContainers = append([]corev1.Container{c}, pod.Spec.InitContainers...)
	if !hasVolume(pod, NoTokenVolumeName) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name:         NoTokenVolumeName,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
		})
	}
	if cfg.RoutingFile && !hasVolume(pod, RoutingVolumeName) {
		optional := true
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name: RoutingVolumeName,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: routing.ConfigMapName(policy.Name)},
				// Optional, on purpose: a ConfigMap absent when the kubelet
				// sets the volume up means no table was in force (the
				// manager writes it before any node agent gets a table, and
				// keeps it until its table holds no split), and the empty
				// volume the kubelet mounts then proves it to the proxy
				// (watch.Unpublished), which serves at once. Required, it
				// would keep the pod in ContainerCreating until the first
				// publication.
				Optional: &optional,
			}},
		})
	}
	if caSecret != "" && !hasVolume(pod, TLSVolumeName) {
		// Not optional: without its CA the proxy cannot verify Redis, and
		// a pod stuck in ContainerCreating names the missing Secret.
		optional := false
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name: TLSVolumeName,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: caSecret,
				Items:      []corev1.KeyToPath{{Key: injectlink.CAKey, Path: injectlink.CAKey}},
				Optional:   &optional,
			}},
		})
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[InjectedAnnotation] = policy.Name
	// The manager watches pods with this label and tells the node agent of
	// the pod's node that the pod's address may send counts, and read
	// routing, for this policy and no other.
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[v1alpha1.LabelPolicy] = policy.Name
	if v := ImageVersion(cfg.Image); v != "" {
		pod.Labels[SidecarVersionLabel] = v
	}
}

// SidecarVersionLabel is the version of the sidecar injected into a pod
// (its image's tag): v1alpha1.LabelSidecarVersion, which the manager counts
// in each policy's status.sidecarVersions. Not app.kubernetes.io/version:
// that label is the application's own version, on the same pod.
const SidecarVersionLabel = v1alpha1.LabelSidecarVersion

// labelValue is what a label value may be (63 characters at most).
var labelValue = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// ImageVersion is the tag of an image reference, or "" when it has none or
// the tag is not a label value ("repo@sha256:..." names no version).
func ImageVersion(image string) string {
	if strings.Contains(image, "@") {
		return ""
	}
	last := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(last, ":")
	if !ok || !labelValue.MatchString(tag) {
		return ""
	}
	return tag
}

func hasVolume(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

// proxyEnv is the proxy's environment. Order matters: a $(VAR) reference
// expands only variables defined before it.
func proxyEnv(policy *v1alpha1.HotKeyPolicy, cfg InjectorConfig) []corev1.EnvVar {
	agent := cfg.NodeAgentAddress
	if agent == "" {
		// the node agent's ingest port, a hostPort on every node
		agent = fmt.Sprintf("%s:%d", injectlink.Ref(injectlink.EnvNodeIP), sidecarlink.DefaultPort)
	}
	fieldRef := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	env := []corev1.EnvVar{
		{Name: injectlink.EnvPolicy, Value: policy.Name},
		{Name: injectlink.EnvNamespace, ValueFrom: fieldRef("metadata.namespace")},
		{Name: injectlink.EnvNodeIP, ValueFrom: fieldRef("status.hostIP")},
		{Name: injectlink.EnvNodeAgent, Value: agent},
		{Name: injectlink.EnvUpstream, Value: strings.Join(policy.Spec.Target.Addresses, ",")},
		{Name: injectlink.EnvCluster, Value: fmt.Sprintf("%t", policy.Spec.Target.Cluster)},
		{Name: injectlink.EnvListen, Value: injectlink.Listen},
		{Name: injectlink.EnvHTTPAddress, Value: injectlink.HTTPAddress},
		{Name: injectlink.EnvStartupWait, Value: injectlink.StartupWait.String()},
	}
	env = append(env, sentinelEnv(policy.Spec.Target.Sentinel)...)
	routingFile := ""
	if cfg.RoutingFile {
		routingFile = injectlink.RoutingFile
	}
	// Set even when empty: the proxy's default is the mounted path.
	env = append(env, corev1.EnvVar{Name: injectlink.EnvRoutingFile, Value: routingFile})
	// The credentials come as files (mountSecrets).
	if t := policy.Spec.Target.TLS; t != nil {
		env = append(env, corev1.EnvVar{Name: injectlink.EnvTLS, Value: "true"})
		if t.ServerName != "" {
			env = append(env, corev1.EnvVar{Name: injectlink.EnvTLSServerName, Value: t.ServerName})
		}
		if t.CASecretRef != nil && t.CASecretRef.Name != "" {
			env = append(env, corev1.EnvVar{Name: injectlink.EnvTLSCAFile, Value: injectlink.TLSMountPath + injectlink.CAKey})
		}
	}
	return env
}

// proxySecurityContext is the restricted Pod Security profile. It sets no
// user or group: the image runs as a non-root numeric user, and a platform
// that assigns IDs to pods (OpenShift's restricted-v2 refuses a fixed
// runAsUser outside the namespace's range) must be free to.
func proxySecurityContext() *corev1.SecurityContext {
	yes, no := true, false
	return &corev1.SecurityContext{
		RunAsNonRoot:             &yes,
		ReadOnlyRootFilesystem:   &yes,
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
