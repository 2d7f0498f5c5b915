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

// TestShedShareSumsToBudget: for any demands whose sum the published demand
// covers, the shares sum to at most the budget, and to at least the budget
// × measured ÷ published when the demand is over the budget.
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
		pub := PublishDemand(0, int64(math.Ceil(total)))
		s := &Shed{WritesPerSecond: budget, DemandWrites: pub}
		sum := 0.0
		for _, o := range own {
			sh := s.Share(ShedWrites, o, true)
			if sh > float64(budget) || sh < 0 {
				t.Fatalf("share %v outside [0, budget %d]", sh, budget)
			}
			sum += sh
		}
		if sum > float64(budget)*(1+1e-9) {
			t.Fatalf("n=%d: shares sum to %v over the budget %d", n, sum, budget)
		}
		if float64(pub) > float64(budget) && total > 0 && sum < float64(budget)*total/float64(pub)*(1-1e-9) {
			t.Fatalf("n=%d: shares sum to %v, under budget × measured ÷ published", n, sum)
		}
	}
}

func TestPublishDemand(t *testing.T) {
	for _, c := range []struct {
		prev, measured, want int64
	}{
		{0, 0, 0},
		{0, 1000, 1050},
		{1050, 1000, 1050}, // inside the band: unchanged
		{1050, 950, 1050},
		{1050, 940, 987},   // under the band: republished
		{1050, 1051, 1104}, // over the published: republished at once
		{1050, 0, 0},
	} {
		if got := PublishDemand(c.prev, c.measured); got != c.want {
			t.Errorf("PublishDemand(%d, %d) = %d, want %d", c.prev, c.measured, got, c.want)
		}
	}
	// Property: the published demand is never below the measured one and
	// at most 2·step (plus rounding) above it.
	r := rand.New(rand.NewPCG(3, 4))
	prev := int64(0)
	for i := 0; i < 10000; i++ {
		m := int64(1 + r.IntN(100000))
		prev = PublishDemand(prev, m)
		if prev < m || float64(prev) > float64(m)*(1+ShedDemandStep)/(1-2*ShedDemandStep)+1 {
			t.Fatalf("measured %d published %d", m, prev)
		}
	}
}
