// Package webhook serves heatsink's admission webhooks: validation of
// HotKeyPolicy for what the CRD's OpenAPI and CEL rules cannot express, and
// sidecar injection into pods that ask for it.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
)

// +kubebuilder:webhook:path=/validate-heatsink-dev-v1alpha1-hotkeypolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=heatsink.dev,resources=hotkeypolicies,verbs=create;update,versions=v1alpha1,name=vhotkeypolicy.heatsink.dev,admissionReviewVersions=v1

// There is no defaulting webhook: defaults live in the CRD schema only. A
// mutating webhook runs before the schema's validation, so one that treated
// 0 as "unset" replaced values the user wrote (readsPerSecond: 0 became
// 5000) instead of letting the schema refuse them. Typed Go clients leave
// unset durations out (omitzero) and get the schema's defaults too.

// SetupHotKeyPolicyWebhook registers the HotKeyPolicy validating webhook with
// the manager's webhook server. opts are the installer's target choices
// (raw addresses off unless enabled).
func SetupHotKeyPolicyWebhook(mgr ctrl.Manager, opts targets.Options) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.HotKeyPolicy{}).
		WithValidator(PolicyValidator{Reader: mgr.GetAPIReader(), Targets: opts}).
		Complete()
}

// MaxNameLength bounds a policy's name: it is the value of the label
// heatsink.dev/policy on the routing ConfigMap and on reports, and a label
// value holds at most 63 characters. A longer name would be admitted and
// then never publish.
const MaxNameLength = validation.LabelValueMaxLength

// MaxSpecBytes bounds a policy's spec, serialised as JSON. Every list of the
// schema is bounded, but their product is not: 32 schedules of 256 keys of
// 512 bytes is 4 MiB, more than etcd takes in one request (1.5 MiB), and the
// user would see "etcdserver: request is too large" with no field. 512 KiB
// leaves room for status and metadata.
const MaxSpecBytes = 512 << 10

// PolicyValidator rejects policies whose fields are syntactically valid for
// the schema but meaningless or unusable: a name too long for a label, bad
// host:port, Secret name, glob, cron or time zone, and a spec too large to
// store; and a target the policy's namespace may not use (package targets).
// It runs after the schema (types, bounds, durations, CEL rules).
type PolicyValidator struct {
	// Reader reads the ClusterRedisTarget, namespace and Service a target
	// names, uncached so that a target just changed is seen. Nil: the
	// target is not checked (pure tests of the other rules).
	Reader client.Reader
	// Targets are the installer's choices (raw addresses).
	Targets targets.Options
}

// ValidateCreate implements admission.Validator.
func (v PolicyValidator) ValidateCreate(ctx context.Context, p *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	return v.validate(ctx, p)
}

// ValidateUpdate implements admission.Validator. An update that changes the
// spec is checked as a create is: a policy admitted before its target
// stopped allowing the namespace cannot be changed to keep using it. One
// that leaves the spec as it was (metadata: the manager's finalizer, labels;
// a deletion in progress) is not refused for its target, or a revoked
// target would keep the manager from removing its finalizer; the manager
// refuses to connect to it at reconcile instead.
func (v PolicyValidator) ValidateUpdate(ctx context.Context, old, p *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	if equality.Semantic.DeepEqual(&old.Spec, &p.Spec) {
		return PolicyValidator{Targets: v.Targets}.validate(ctx, p)
	}
	return v.validate(ctx, p)
}

// ValidateDelete implements admission.Validator; deletion is always allowed.
func (PolicyValidator) ValidateDelete(context.Context, *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	return nil, nil
}

func (v PolicyValidator) validate(ctx context.Context, p *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	errs, warnings := ValidateSpec(&p.Spec, field.NewPath("spec"))
	errs = append(ValidateName(p.Name, field.NewPath("metadata", "name")), errs...)
	if len(errs) == 0 && v.Reader != nil {
		in, err := targets.Read(ctx, v.Reader, p.Namespace, &p.Spec)
		if err != nil {
			return warnings, apierrors.NewInternalError(fmt.Errorf("reading the policy's target: %w", err))
		}
		if _, refusal := targets.Resolve(&p.Spec, in, v.Targets); refusal != nil {
			parts := strings.Split(refusal.Field, ".")
			errs = append(errs, field.Forbidden(field.NewPath(parts[0], parts[1:]...), refusal.Message+" (rule "+refusal.Rule+")"))
		}
	}
	if len(errs) == 0 {
		return warnings, nil
	}
	return warnings, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("HotKeyPolicy").GroupKind(), p.Name, errs)
}

// ValidateName refuses a policy name that cannot be a label value.
func ValidateName(name string, path *field.Path) field.ErrorList {
	if len(name) > MaxNameLength {
		return field.ErrorList{field.Invalid(path, name, fmt.Sprintf(
			"must be at most %d characters: the name is the value of the label %s on the policy's routing ConfigMap and reports", MaxNameLength, v1alpha1.LabelPolicy))}
	}
	return nil
}

// ValidateSpec is the webhook's validation as a pure function: it returns
// every error found, each naming its field, and warnings for legal but
// suspicious settings.
func ValidateSpec(spec *v1alpha1.HotKeyPolicySpec, path *field.Path) (field.ErrorList, admission.Warnings) {
	var errs field.ErrorList
	var warnings admission.Warnings

	if raw, err := json.Marshal(spec); err == nil && len(raw) > MaxSpecBytes {
		errs = append(errs, field.Invalid(path, fmt.Sprintf("%d bytes of JSON", len(raw)), fmt.Sprintf(
			"the spec is too large to store: at most %d KiB of JSON (etcd takes 1.5 MiB per object, status and metadata included); use fewer or shorter keys in schedules and keys", MaxSpecBytes>>10)))
	}
	for i, a := range spec.Target.Addresses {
		if err := validateHostPort(a); err != nil {
			errs = append(errs, field.Invalid(path.Child("target", "addresses").Index(i), a, err.Error()))
		}
	}
	if ref := spec.Target.CredentialsSecretRef; ref != nil {
		errs = append(errs, secretName(path.Child("target", "credentialsSecretRef", "name"), ref.Name)...)
	}
	if sn := spec.Target.Sentinel; sn != nil {
		for i, a := range sn.Addresses {
			if err := validateHostPort(a); err != nil {
				errs = append(errs, field.Invalid(path.Child("target", "sentinel", "addresses").Index(i), a, err.Error()))
			}
		}
		if ref := sn.CredentialsSecretRef; ref != nil {
			errs = append(errs, secretName(path.Child("target", "sentinel", "credentialsSecretRef", "name"), ref.Name)...)
		}
	}
	if t := spec.Target.TLS; t != nil && t.CASecretRef != nil {
		errs = append(errs, secretName(path.Child("target", "tls", "caSecretRef", "name"), t.CASecretRef.Name)...)
	}
	if t := spec.Target.TLS; t != nil && t.ClientCertSecretRef != nil {
		errs = append(errs, secretName(path.Child("target", "tls", "clientCertSecretRef", "name"), t.ClientCertSecretRef.Name)...)
	}
	for i, g := range spec.Keys.Include {
		if err := keyfilter.Validate(g); err != nil {
			errs = append(errs, field.Invalid(path.Child("keys", "include").Index(i), g, err.Error()))
		}
	}
	for i, g := range spec.Keys.Exclude {
		if err := keyfilter.Validate(g); err != nil {
			errs = append(errs, field.Invalid(path.Child("keys", "exclude").Index(i), g, err.Error()))
		}
	}
	filter, ferr := keyfilter.Compile(spec.Keys.Include, spec.Keys.Exclude)
	for i := range spec.Schedules {
		s := &spec.Schedules[i]
		sp := path.Child("schedules").Index(i)
		if _, _, err := schedule.Parse(s); err != nil {
			var fe *schedule.FieldError
			if errors.As(err, &fe) {
				errs = append(errs, field.Invalid(sp.Child(fe.Field), fe.Value, fe.Detail))
			} else {
				errs = append(errs, field.Invalid(sp, s.Name, err.Error()))
			}
		}
		if ferr == nil {
			for j, k := range s.Keys {
				if !filter.Match(k) {
					warnings = append(warnings, fmt.Sprintf("%s: key %q is outside spec.keys; the schedule still applies to it", sp.Child("keys").Index(j), k))
				}
			}
		}
	}
	if th := spec.Thresholds; th.Auto != nil && th.ReadsPerSecond > 0 && th.WritesPerSecond > 0 {
		warnings = append(warnings, fmt.Sprintf("%s: readsPerSecond and writesPerSecond are both typed, and a typed number wins: auto derives no threshold (it still sizes splits and copies unless capacity.* is typed)",
			path.Child("thresholds", "auto")))
	}
	return errs, warnings
}

// secretName refuses a reference that no Secret can have: the API server
// would accept it and the policy would wait forever for a Secret that can
// never be created.
func secretName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "the name of a Secret in the policy's namespace, such as redis-auth")}
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, name, "not a Secret name ("+strings.Join(msgs, "; ")+"), such as redis-auth")}
	}
	return nil
}

func validateHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("must be host:port (IPv6 as [addr]:port): %v", err)
	}
	if host == "" {
		return fmt.Errorf("host is empty")
	}
	if strings.ContainsAny(host, " /\t") {
		return fmt.Errorf("host %q is not a DNS name or IP address", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q must be a number from 1 to 65535", port)
	}
	return nil
}
