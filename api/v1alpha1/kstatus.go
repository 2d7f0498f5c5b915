package v1alpha1

// The conditions that kstatus (sigs.k8s.io/cli-utils/pkg/kstatus), and so
// Flux, Argo CD's health checks and `kubectl wait`-style tools, read from any
// resource. Both have abnormal-true polarity: False is the normal state, and
// each is set with observedGeneration. They are derived from Ready and
// Degraded (controllers' setKstatusConditions), never decided on their own.
const (
	// ConditionReconciling is True while the manager is still carrying out
	// the policy's last change: splits published before a switch to
	// Observe are being unsplit and folded.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True while the policy cannot make progress
	// without outside help: Degraded is True (Redis unreachable,
	// credentials missing, a schedule that cannot be evaluated, nodes that
	// stopped reporting) or the routing table cannot be published. Its
	// reason and message are those of the condition it mirrors.
	ConditionStalled = "Stalled"
)

// Reasons of the kstatus conditions when they are False, and of
// Reconciling when it is True.
const (
	// ReasonReconciled: Reconciling is False, the last change is carried
	// out.
	ReasonReconciled = "Reconciled"
	// ReasonDrainingSplits: Reconciling is True, splits published before a
	// switch to Observe are being unsplit and folded.
	ReasonDrainingSplits = "DrainingSplits"
	// ReasonProgressing: Stalled is False, nothing blocks the policy.
	ReasonProgressing = "Progressing"
)
