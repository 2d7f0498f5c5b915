// Package webhook serves heatsink's admission webhooks: validation and
// defaulting of HotKeyPolicy for what the CRD's OpenAPI and CEL rules cannot
// express, and sidecar injection into pods that ask for it.
package webhook

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
)

// +kubebuilder:webhook:path=/validate-heatsink-dev-v1alpha1-hotkeypolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=heatsink.dev,resources=hotkeypolicies,verbs=create;update,versions=v1alpha1,name=vhotkeypolicy.heatsink.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/mutate-heatsink-dev-v1alpha1-hotkeypolicy,mutating=true,failurePolicy=fail,sideEffects=None,groups=heatsink.dev,resources=hotkeypolicies,verbs=create;update,versions=v1alpha1,name=mhotkeypolicy.heatsink.dev,admissionReviewVersions=v1

// SetupHotKeyPolicyWebhook registers the HotKeyPolicy validating and defaulting
// webhooks with the manager's webhook server.
func SetupHotKeyPolicyWebhook(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.HotKeyPolicy{}).
		WithValidator(PolicyValidator{}).
		WithDefaulter(PolicyDefaulter{}).
		Complete()
}

// PolicyDefaulter fills unset fields with the same defaults as the schema.
// For YAML clients the schema has already done so and it changes nothing (no
// drift for GitOps tools). It matters for typed Go clients: a Go struct
// always serialises a metav1.Duration, so an unset duration arrives as "0s"
// and the schema default never applies; for every duration here zero means
// "the default" (documented on each field).
type PolicyDefaulter struct{}

// Default implements admission.Defaulter.
func (PolicyDefaulter) Default(_ context.Context, p *v1alpha1.HotKeyPolicy) error {
	v1alpha1.SetDefaults(&p.Spec)
	return nil
}

// PolicyValidator rejects policies whose fields are syntactically valid for
// the schema but meaningless: bad host:port, glob, cron or time zone, and a
// broken label selector.
type PolicyValidator struct{}

// ValidateCreate implements admission.Validator.
func (PolicyValidator) ValidateCreate(_ context.Context, p *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	return validate(p)
}

// ValidateUpdate implements admission.Validator.
func (PolicyValidator) ValidateUpdate(_ context.Context, _, p *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	return validate(p)
}

// ValidateDelete implements admission.Validator; deletion is always allowed.
func (PolicyValidator) ValidateDelete(context.Context, *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	return nil, nil
}

func validate(p *v1alpha1.HotKeyPolicy) (admission.Warnings, error) {
	errs, warnings := ValidateSpec(&p.Spec, field.NewPath("spec"))
	if len(errs) == 0 {
		return warnings, nil
	}
	return warnings, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("HotKeyPolicy").GroupKind(), p.Name, errs)
}

// ValidateSpec is the webhook's validation as a pure function: it returns
// every error found, each naming its field, and warnings for legal but
// suspicious settings.
func ValidateSpec(spec *v1alpha1.HotKeyPolicySpec, path *field.Path) (field.ErrorList, admission.Warnings) {
	var errs field.ErrorList
	var warnings admission.Warnings

	for i, a := range spec.Target.Addresses {
		if err := validateHostPort(a); err != nil {
			errs = append(errs, field.Invalid(path.Child("target", "addresses").Index(i), a, err.Error()))
		}
	}
	if spec.ClientSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(spec.ClientSelector); err != nil {
			errs = append(errs, field.Invalid(path.Child("clientSelector"), spec.ClientSelector, err.Error()))
		}
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
	errs = append(errs, positive(path.Child("detection", "window"), spec.Detection.Window)...)
	errs = append(errs, positive(path.Child("detection", "reportInterval"), spec.Detection.ReportInterval)...)
	if spec.Mitigations.LocalCache.IsEnabled() {
		errs = append(errs, positive(path.Child("mitigations", "localCache", "ttl"), spec.Mitigations.LocalCache.TTL)...)
	}
	if spec.Mitigations.Replicate.IsEnabled() {
		errs = append(errs, positive(path.Child("mitigations", "replicate", "replicaTTL"), spec.Mitigations.Replicate.ReplicaTTL)...)
	}
	if spec.Mitigations.PreAggregate.IsEnabled() {
		errs = append(errs, positive(path.Child("mitigations", "preAggregate", "flushInterval"), spec.Mitigations.PreAggregate.FlushInterval)...)
	}
	filter, ferr := keyfilter.Compile(spec.Keys.Include, spec.Keys.Exclude)
	for i := range spec.Schedules {
		s := &spec.Schedules[i]
		sp := path.Child("schedules").Index(i)
		if s.Cron != "" {
			if _, err := cron.ParseStandard(s.Cron); err != nil {
				errs = append(errs, field.Invalid(sp.Child("cron"), s.Cron, "not a five-field cron expression (minute hour day-of-month month day-of-week): "+err.Error()))
			}
		}
		if s.TimeZone != "" {
			if s.Cron == "" {
				errs = append(errs, field.Invalid(sp.Child("timeZone"), s.TimeZone, "timeZone applies to cron only; start carries its own offset"))
			} else if _, err := time.LoadLocation(s.TimeZone); err != nil {
				errs = append(errs, field.Invalid(sp.Child("timeZone"), s.TimeZone, "unknown IANA time zone"))
			}
		}
		errs = append(errs, positive(sp.Child("duration"), s.Duration)...)
		if s.Mitigation.LocalCache != nil && s.Mitigation.LocalCache.TTL != nil {
			errs = append(errs, positive(sp.Child("mitigation", "localCache", "ttl"), *s.Mitigation.LocalCache.TTL)...)
		}
		if ferr == nil {
			for j, k := range s.Keys {
				if !filter.Match(k) {
					warnings = append(warnings, fmt.Sprintf("%s: key %q is outside spec.keys; the schedule still applies to it", sp.Child("keys").Index(j), k))
				}
			}
		}
	}
	return errs, warnings
}

func positive(p *field.Path, d metav1.Duration) field.ErrorList {
	if d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be greater than zero")}
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
