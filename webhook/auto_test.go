package webhook

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestAutoWithBothThresholdsTypedWarns: auto beside two typed numbers
// derives nothing; the policy is admitted with a warning saying so, and
// auto beside one typed number, or alone, is not warned about.
func TestAutoWithBothThresholdsTypedWarns(t *testing.T) {
	for _, tc := range []struct {
		reads, writes int64
		warn          bool
	}{{5000, 1000, true}, {5000, 0, false}, {0, 0, false}} {
		spec := &v1alpha1.HotKeyPolicySpec{Thresholds: v1alpha1.Thresholds{Auto: &v1alpha1.AutoThresholds{}, ReadsPerSecond: tc.reads, WritesPerSecond: tc.writes}}
		errs, warnings := ValidateSpec(spec, field.NewPath("spec"))
		got := len(warnings) == 1 && strings.Contains(warnings[0], "spec.thresholds.auto: readsPerSecond and writesPerSecond are both typed")
		if len(errs) != 0 || got != tc.warn || (!tc.warn && len(warnings) != 0) {
			t.Errorf("reads %d writes %d: errors %v warnings %q", tc.reads, tc.writes, errs, warnings)
		}
	}
}
