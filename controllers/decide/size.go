package decide

import (
	"math"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// How many physical keys a move takes: the design's rule (docs/design.md,
// Sizes from the numbers), for splits and replicas alike.

// Size is the smallest count of physical keys that serves rate with
// headroom: ceil(rate × (1+headroom) / perKey), clamped to [2, max].
func Size(rate int64, headroomPercent int32, perKey int64, max int32) int32 {
	if perKey <= 0 {
		return max
	}
	n := math.Ceil(withHeadroom(rate, headroomPercent) / float64(perKey))
	if n < 2 {
		return 2
	}
	if n > float64(max) {
		return max
	}
	return int32(n)
}

// shrinkSize is the split size a shrinking counter may go to: the size for
// its rate raised by the policy's hysteresis, so a shrink never has to be
// undone by the next small rise.
func shrinkSize(rate int64, spec *v1alpha1.HotKeyPolicySpec, perKey int64) int32 {
	h := float64(spec.Thresholds.HysteresisPercent) / 100
	raised := int64(math.Ceil(float64(rate) / (1 - min(h, 0.9))))
	m := &spec.Mitigations
	return Size(raised, spec.Capacity.HeadroomPercent, perKey, m.Split.MaxShards)
}

func withHeadroom(rate int64, headroomPercent int32) float64 {
	return float64(rate) * (1 + float64(headroomPercent)/100)
}
