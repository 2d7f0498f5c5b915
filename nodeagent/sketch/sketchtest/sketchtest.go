// Package sketchtest generates the workloads the sketch is measured on and
// scores a top-K answer against exact counts. Tests and the benchmark module
// share it so that they measure the same thing.
package sketchtest

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"unsafe"
)

// Zipf draws ranks 0..n-1 with P(rank i) ∝ 1/(i+1)^s, for any s > 0
// (math/rand's Zipf needs s > 1, and the workload is s = 1.0).
type Zipf struct {
	cdf []float64
	r   *rand.Rand
}

// NewZipf precomputes the CDF of n ranks.
func NewZipf(n int, s float64, seed uint64) *Zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range cdf {
		sum += 1 / math.Pow(float64(i+1), s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return &Zipf{cdf: cdf, r: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// Next draws a rank.
func (z *Zipf) Next() int {
	u := z.r.Float64()
	i := sort.SearchFloat64s(z.cdf, u)
	return min(i, len(z.cdf)-1)
}

// Keys returns n distinct key names, shuffled so that rank and name do not
// correlate with hash order.
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "product:" + strconv.Itoa(i*7919%1000003) + ":v"
	}
	return keys
}

// Stream is a pre-generated observation stream.
type Stream struct {
	Keys   []string
	Ranks  []int32 // one per observation
	Writes []bool  // one per observation: a write (else a read)
}

// NewStream draws n observations over distinct keys with Zipf(s), a
// writeFrac share of them writes.
func NewStream(distinct, n int, s, writeFrac float64, seed uint64) *Stream {
	z := NewZipf(distinct, s, seed)
	st := &Stream{Keys: Keys(distinct), Ranks: make([]int32, n), Writes: make([]bool, n)}
	r := rand.New(rand.NewPCG(seed+1, seed))
	for i := range st.Ranks {
		st.Ranks[i] = int32(z.Next())
		st.Writes[i] = r.Float64() < writeFrac
	}
	return st
}

// Exact counts the stream exactly.
func (st *Stream) Exact() map[string]uint64 {
	m := make(map[string]uint64)
	for _, r := range st.Ranks {
		m[st.Keys[r]]++
	}
	return m
}

// TopExact returns the k keys with the highest counts, ties broken by name.
func TopExact(counts map[string]uint64, k int) []string {
	keys := make([]string, 0, len(counts))
	for key := range counts {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if counts[a] != counts[b] {
			if counts[a] > counts[b] {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	return keys[:min(k, len(keys))]
}

// Score compares a reported top-k (keys and their estimated counts) with the
// exact counts. A reported key counts as correct when its exact count is at
// least the k-th largest exact count, so ties at the boundary are not
// punished. Recall is the share of the k slots of the true top-k covered by
// correct reported keys (with ties, a key tied with the k-th may stand in).
// RelErr is the mean relative error of the estimates of the reported keys
// that are in the true top-k.
type Result struct {
	Precision, Recall, RelErr float64
}

// Score scores got (key → estimated count).
func Score(exact map[string]uint64, k int, got map[string]uint64) Result {
	top := TopExact(exact, k)
	if len(top) == 0 {
		return Result{}
	}
	kth := exact[top[len(top)-1]]
	inTop := make(map[string]bool, len(top))
	for _, key := range top {
		inTop[key] = true
	}
	var correct, hit int
	var relErr float64
	for key, est := range got {
		if exact[key] >= kth {
			correct++
		}
		if inTop[key] {
			hit++
			relErr += math.Abs(float64(est)-float64(exact[key])) / float64(exact[key])
		}
	}
	r := Result{Recall: float64(min(correct, len(top))) / float64(len(top))}
	if len(got) > 0 {
		r.Precision = float64(correct) / float64(len(got))
	}
	if hit > 0 {
		r.RelErr = relErr / float64(hit)
	}
	return r
}

// Laid is the stream laid out for speed measurement: each observation's key
// is a copy in one contiguous buffer, in stream order, so a benchmark reads
// memory sequentially as a decoder reading datagrams does, instead of
// measuring cache misses on a million scattered strings.
type Laid struct {
	Keys   []string // per observation, aliasing one buffer
	Writes []bool
}

// Lay lays st out.
func (st *Stream) Lay() *Laid {
	size := 0
	for _, r := range st.Ranks {
		size += len(st.Keys[r])
	}
	buf := make([]byte, 0, size)
	l := &Laid{Keys: make([]string, len(st.Ranks)), Writes: st.Writes}
	for i, r := range st.Ranks {
		start := len(buf)
		buf = append(buf, st.Keys[r]...)
		l.Keys[i] = unsafe.String(&buf[start], len(buf)-start) // buf never grows: no copy
	}
	return l
}
