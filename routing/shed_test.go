package routing

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestShedShare(t *testing.T) {
	s := &Shed{WritesPerSecond: 1000, DemandWrites: 5000, MinPerSecond: 10}
	for _, c := range []struct {
		name     string
		dir      int
		own      float64
		measured bool
		want     float64
	}{
		{"a fifth of the demand gets a fifth of the budget", ShedWrites, 1000, true, 200},
		{"an idle reader lends its share", ShedWrites, 0, true, 0},
		{"an unmeasured reader starts from the minimum", ShedWrites, 4000, false, 10},
		{"a demand over the published one is capped at the budget", ShedWrites, 8000, true, 1000},
		{"a direction without budget is not shed", ShedReads, 1e9, true, math.Inf(1)},
	} {
		if got := s.Share(c.dir, c.own, c.measured); got != c.want {
			t.Errorf("%s: Share = %v, want %v", c.name, got, c.want)
		}
	}
	under := &Shed{WritesPerSecond: 1000, DemandWrites: 600}
	if got := under.Share(ShedWrites, 300, true); got < 300 {
		t.Errorf("within the budget a reader's share %v must cover its demand 300", got)
	}
	if got := (&Shed{WritesPerSecond: 5, MinPerSecond: 50}).Share(ShedWrites, 0, false); got != 5 {
		t.Errorf("the minimum is capped by the budget: got %v", got)
	}
}

// TestShedShareSumsToBudget: for any demands, the shares sum to at most
// the budget × max(1, their sum ÷ the published demand), and to exactly
// budget × sum ÷ published when every reader is under the published demand.
func TestShedShareSumsToBudget(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 2000; iter++ {
		n := 1 + r.IntN(1000)
		own := make([]float64, n)
		total := 0.0
		for i := range own {
			if r.IntN(4) > 0 { // a quarter idle
				own[i] = r.Float64() * 1000
			}
			total += own[i]
		}
		budget := int64(1 + r.IntN(100000))
		// The published demand: one the measured sum is within the step
		// of (PublishDemand's band).
		pub := max(int64(math.Ceil(total/(1+ShedDemandStep*(2*r.Float64()-1)))), 1)
		s := &Shed{WritesPerSecond: budget, DemandWrites: pub}
		sum := 0.0
		for _, o := range own {
			sh := s.Share(ShedWrites, o, true)
			if sh > float64(budget) || sh < 0 {
				t.Fatalf("share %v outside [0, budget %d]", sh, budget)
			}
			sum += sh
		}
		if limit := float64(budget) * max(1, total/float64(pub)); sum > limit*(1+1e-9) {
			t.Fatalf("n=%d: shares sum to %v over %v", n, sum, limit)
		}
		if sum > float64(budget)*(1+ShedDemandStep)*(1+1e-9) {
			t.Fatalf("n=%d: shares sum to %v, more than the step over the budget %d", n, sum, budget)
		}
	}
}

func TestPublishDemand(t *testing.T) {
	for _, c := range []struct {
		prev, measured, want int64
	}{
		{0, 0, 0},
		{0, 1000, 1000},
		{1000, 1040, 1000}, // inside the band: unchanged
		{1000, 950, 1000},
		{1000, 940, 940}, // out of the band: republished
		{1000, 1051, 1051},
		{1000, 0, 0},
	} {
		if got := PublishDemand(c.prev, c.measured); got != c.want {
			t.Errorf("PublishDemand(%d, %d) = %d, want %d", c.prev, c.measured, got, c.want)
		}
	}
	// Property: the published demand is within the step of the measured
	// one, either way.
	r := rand.New(rand.NewPCG(3, 4))
	prev := int64(0)
	m := int64(50000)
	for i := 0; i < 10000; i++ {
		m = max(m+int64(r.NormFloat64()*2000), 1)
		prev = PublishDemand(prev, m)
		if math.Abs(float64(prev-m)) > ShedDemandStep*float64(prev) {
			t.Fatalf("measured %d published %d", m, prev)
		}
	}
}
