// Command nodeagentbench measures heatsink's heavy-hitter sketch against an
// exact map and the published Go top-K structures on the same pre-generated
// Zipf stream, in one run, and measures the node agent's reaction time with
// the manager's real hub. It prints Markdown (progress on stderr); it is run by
// hack/bench.d/20-node-agent.sh with GOMAXPROCS=1 for one-core numbers.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-kratos/aegis/topk"
	boom "github.com/tylertreat/BoomFilters"

	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch/sketchtest"
)

var (
	distinct = flag.Int("distinct", 1_000_000, "distinct keys in the stream")
	n        = flag.Int("n", 5_000_000, "observations in the stream")
	k        = flag.Int("k", 100, "K of top-K")
	runs     = flag.Int("runs", 3, "speed runs per contender (the median is printed)")
	flood    = flag.Int("flood", 10_000_000, "distinct keys of the memory flood test")
	sweep    = flag.Bool("sweep", true, "print the memory-budget curve")
	storePct = flag.Int("store", 0, "heatsink sketch StoreFactor override (percent of K); 0 keeps the default")
	reaction = flag.Int("reaction", 5, "reaction trials against the real hub; 0 skips")
)

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// feeder is one contender configured for a memory budget.
type feeder struct {
	feed func(l *sketchtest.Laid) // count the whole stream
	top  func(k int) map[string]uint64
}

type contender struct {
	name, note string
	build      func(budget int) feeder
}

var t0 = time.Unix(1_800_000_000, 0)

// bytesOf views a string as bytes without copying (BoomFilters takes []byte
// and keeps it; the stream's strings are never modified).
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func ours(hashed bool) func(int) feeder {
	return func(budget int) feeder {
		s, err := sketch.New(sketch.Config{K: *k, MemoryBytes: budget, StoreFactor: *storePct})
		if err != nil {
			return feeder{}
		}
		return feeder{
			feed: func(l *sketchtest.Laid) {
				var hashes []uint64
				if hashed {
					hashes = make([]uint64, len(l.Keys))
					for i, key := range l.Keys {
						hashes[i] = s.Hash(key)
					}
				}
				// The stream spans one 10s window: a slot every tenth.
				slot := len(l.Keys)/10 + 1
				s.Advance(t0)
				start := cpuTime()
				for i, key := range l.Keys {
					if i%slot == 0 {
						s.Advance(t0.Add(time.Duration(i/slot) * time.Second))
					}
					var r, w uint32 = 1, 0
					if l.Writes[i] {
						r, w = 0, 1
					}
					if hashed {
						s.UpdateHashed(key, hashes[i], r, w, 64)
					} else {
						s.Update(key, r, w, 64)
					}
				}
				lastElapsed = cpuTime() - start
			},
			top: func(k int) map[string]uint64 {
				m := map[string]uint64{}
				for _, it := range s.Top(k) {
					m[it.Key] = it.Score
				}
				return m
			},
		}
	}
}

// lastElapsed lets a contender exclude its own set-up (pre-hashing) from the
// timed part; zero means "time the whole feed".
var lastElapsed time.Duration

// cpuTime is the process's user+system CPU time. Speeds are observations
// per CPU-second: on a shared machine, wall time would count the time other
// processes held the core. With GOMAXPROCS=1 the process uses one core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func exact(int) feeder {
	m := map[string]uint64{}
	return feeder{
		feed: func(l *sketchtest.Laid) {
			for _, key := range l.Keys {
				m[key]++
			}
		},
		top: func(k int) map[string]uint64 {
			out := map[string]uint64{}
			for _, key := range sketchtest.TopExact(m, k) {
				out[key] = m[key]
			}
			return out
		},
	}
}

// aegisHK is go-kratos/aegis's HeavyKeeper: depth 2 and b = 1.08 as in the
// paper and as ours; the width takes what the budget leaves after the heap.
func aegisHK(budget int) feeder {
	width := (budget - *k*64) / (2 * 8)
	if width < 16 {
		return feeder{}
	}
	hk := topk.NewHeavyKeeper(uint32(*k), uint32(width), 2, 1/1.08, 0)
	return feeder{
		feed: func(l *sketchtest.Laid) {
			for _, key := range l.Keys {
				hk.Add(key, 1)
			}
		},
		top: func(int) map[string]uint64 {
			m := map[string]uint64{}
			for _, it := range hk.List() {
				m[it.Key] = uint64(it.Count)
			}
			return m
		},
	}
}

// boomTopK is BoomFilters' Count-Min top-K: depth 4 (δ = e^-4), the width
// from the budget after the heap (uint64 counters).
func boomTopK(budget int) feeder {
	width := (budget - *k*64) / (4 * 8)
	if width < 16 {
		return feeder{}
	}
	t := boom.NewTopK(math.E/float64(width), math.Exp(-4), uint(*k))
	return feeder{
		feed: func(l *sketchtest.Laid) {
			for _, key := range l.Keys {
				t.Add(bytesOf(key))
			}
		},
		top: func(int) map[string]uint64 {
			m := map[string]uint64{}
			for _, e := range t.Elements() {
				m[string(e.Data)] = e.Freq
			}
			return m
		},
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

type result struct {
	mops     float64
	mem      int64
	accuracy sketchtest.Result
}

// measure feeds the stream runs times into fresh instances; speed is the
// median, memory the heap growth of the last instance.
func measure(c contender, budget int, laid *sketchtest.Laid, exactCounts map[string]uint64, runs int) (result, bool) {
	var speeds []float64
	var res result
	for r := 0; r < runs; r++ {
		before := heap()
		f := c.build(budget)
		if f.feed == nil {
			return result{}, false
		}
		lastElapsed = 0
		start := cpuTime()
		f.feed(laid)
		el := cpuTime() - start
		if lastElapsed > 0 {
			el = lastElapsed
		}
		speeds = append(speeds, float64(len(laid.Keys))/el.Seconds()/1e6)
		if r == runs-1 {
			res.mem = int64(heap()) - int64(before)
			res.accuracy = sketchtest.Score(exactCounts, *k, f.top(*k))
		}
		runtime.KeepAlive(f)
	}
	slices.Sort(speeds)
	res.mops = speeds[len(speeds)/2]
	return res, true
}

func kib(b int64) string {
	if b >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f KiB", float64(b)/(1<<10))
}

func main() {
	flag.Parse()
	logf("nodeagentbench: generating Zipf(1.0) stream: %d observations over %d keys", *n, *distinct)
	st := sketchtest.NewStream(*distinct, *n, 1.0, 0.1, 42)
	laid := st.Lay()
	exactCounts := st.Exact()

	contenders := []contender{
		{"heatsink sketch", "windowed (10 slots), reads/writes/bytes apart, hashing included", ours(false)},
		{"heatsink sketch, pre-hashed", "as above, keys hashed ahead (as a decoder can)", ours(true)},
		{"exact map[string]uint64", "no window, unbounded memory", exact},
		{"aegis/topk HeavyKeeper v0.2.0", "no window, one count", aegisHK},
		{"BoomFilters TopK (Count-Min)", "no window, one count", boomTopK},
	}

	fmt.Println("## NodeAgent: heavy-hitter sketch")
	fmt.Println()
	fmt.Printf("Stream: Zipf(1.0), %d observations over %d distinct string keys, 10%% writes, K=%d, "+
		"pre-generated and laid out contiguously; GOMAXPROCS=%d; %s. Speed is observations per CPU-second of the "+
		"process (the machine is shared), median of %d runs; memory is the measured heap growth, keys included.\n\n", *n, *distinct, *k, runtime.GOMAXPROCS(0), runtime.Version(), *runs)
	fmt.Println("### Side by side at 64 KiB per policy")
	fmt.Println()
	fmt.Println("| structure | M obs/s (1 core) | vs exact map | memory | precision@100 | recall@100 | rel. error of top-100 counts | notes |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---|")
	var exactSpeed float64
	results := map[string]result{}
	for _, c := range contenders {
		logf("nodeagentbench: %s", c.name)
		r, ok := measure(c, 64<<10, laid, exactCounts, *runs)
		if !ok {
			continue
		}
		results[c.name] = r
		if c.name == "exact map[string]uint64" {
			exactSpeed = r.mops
		}
	}
	for _, c := range contenders {
		r, ok := results[c.name]
		if !ok {
			continue
		}
		ratio := "—"
		if exactSpeed > 0 {
			ratio = fmt.Sprintf("%.2f×", r.mops/exactSpeed)
		}
		fmt.Printf("| %s | %.2f | %s | %s | %.3f | %.3f | %.4f | %s |\n", c.name, r.mops, ratio, kib(r.mem),
			r.accuracy.Precision, r.accuracy.Recall, r.accuracy.RelErr, c.note)
	}
	fmt.Println()

	if *sweep {
		budgetCurve(contenders, laid, exactCounts)
	}
	floodTest()
	if *reaction > 0 {
		if err := reactionTest(context.Background(), *reaction); err != nil {
			fmt.Printf("Reaction benchmark failed: %v\n\n", err)
		}
	}
}

func budgetCurve(contenders []contender, laid *sketchtest.Laid, exactCounts map[string]uint64) {
	fmt.Println("### Precision@100 / recall@100 / relative error by memory budget")
	fmt.Println()
	fmt.Println("| budget | heatsink sketch | aegis HeavyKeeper | BoomFilters TopK |")
	fmt.Println("|---:|---|---|---|")
	for _, budget := range []int{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20} {
		logf("nodeagentbench: budget %d", budget)
		row := fmt.Sprintf("| %s |", kib(int64(budget)))
		for _, c := range []contender{contenders[0], contenders[3], contenders[4]} {
			r, ok := measure(c, budget, laid, exactCounts, 1)
			if !ok {
				row += " too small |"
				continue
			}
			row += fmt.Sprintf(" %.2f / %.2f / %.4f (%s) |", r.accuracy.Precision, r.accuracy.Recall, r.accuracy.RelErr, kib(r.mem))
		}
		fmt.Println(row)
	}
	fmt.Println()
	fmt.Println("Each cell: precision / recall / mean relative error of the counts of the true top-100 (measured heap).")
	fmt.Println()
}

// floodTest sends many distinct keys through one sketch and prints its size.
func floodTest() {
	logf("nodeagentbench: flood of %d distinct keys", *flood)
	s, err := sketch.New(sketch.Config{K: *k})
	if err != nil {
		panic(err)
	}
	s.Advance(t0)
	before := s.Bytes()
	hb := heap()
	buf := make([]byte, 0, 32)
	start := cpuTime()
	for i := 0; i < *flood; i++ {
		buf = strconv.AppendInt(append(buf[:0], "flood:"...), int64(i), 10)
		s.Update(unsafe.String(&buf[0], len(buf)), 1, 0, 0)
		if i%1_000_000 == 0 {
			s.Advance(t0.Add(time.Duration(i/1_000_000) * time.Second))
		}
	}
	el := cpuTime() - start
	ha := heap()
	runtime.KeepAlive(s)
	fmt.Println("### Memory under a flood of unique keys")
	fmt.Println()
	fmt.Printf("%d distinct keys through one policy's sketch (64 KiB budget) at %.1f M obs/s: sketch size %s before, %s after; heap growth %s.\n\n",
		*flood, float64(*flood)/el.Seconds()/1e6, kib(int64(before)), kib(int64(s.Bytes())), kib(int64(ha)-int64(hb)))
}
