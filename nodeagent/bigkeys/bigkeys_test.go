package bigkeys

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/agentlink"
)

var t0 = time.Unix(1000, 0)

type obs struct {
	at   time.Duration // since t0
	key  string
	size uint64
}

func TestTop(t *testing.T) {
	const w = time.Minute
	tests := map[string]struct {
		n    int
		obs  []obs
		at   time.Duration // Advance to t0+at before listing
		want []agentlink.KeySize
	}{
		"largest first, ties by key": {n: 4, obs: []obs{{0, "b", 10}, {0, "a", 10}, {0, "c", 30}, {0, "d", 20}},
			want: []agentlink.KeySize{{Key: "c", Bytes: 30}, {Key: "d", Bytes: 20}, {Key: "a", Bytes: 10}, {Key: "b", Bytes: 10}}},
		"a key keeps its largest access": {n: 2, obs: []obs{{0, "h", 5 << 20}, {0, "h", 100}},
			want: []agentlink.KeySize{{Key: "h", Bytes: 5 << 20}}},
		"bounded: the smallest is replaced": {n: 2, obs: []obs{{0, "a", 10}, {0, "b", 20}, {0, "c", 15}, {0, "d", 5}},
			want: []agentlink.KeySize{{Key: "b", Bytes: 20}, {Key: "c", Bytes: 15}}},
		"many small keys never push out a big one": {n: 2, obs: append([]obs{{0, "big", 20 << 20}}, smalls(1000)...),
			want: []agentlink.KeySize{{Key: "big", Bytes: 20 << 20}, {Key: "s999", Bytes: 1999}}},
		"size 0 and empty keys are ignored": {n: 2, obs: []obs{{0, "a", 0}, {0, "", 9}},
			want: nil},
		"the previous window still counts": {n: 2, obs: []obs{{0, "a", 100}, {w, "a", 10}}, at: w + w/2,
			want: []agentlink.KeySize{{Key: "a", Bytes: 100}}},
		"a key unseen for a window leaves": {n: 2, obs: []obs{{0, "a", 100}, {w, "b", 10}}, at: 2 * w,
			want: []agentlink.KeySize{{Key: "b", Bytes: 10}}},
		"a long silence empties it": {n: 2, obs: []obs{{0, "a", 100}}, at: 2 * w,
			want: nil},
		"a big idle key seen once per window stays": {n: 2,
			obs: []obs{{0, "idle", 1 << 30}, {w / 2, "x", 1}, {w + w/2, "idle", 1 << 30}, {2*w + w/2, "idle", 1 << 30}}, at: 3 * w,
			want: []agentlink.KeySize{{Key: "idle", Bytes: 1 << 30}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			top := New(tc.n, w)
			for _, o := range tc.obs {
				top.Advance(t0.Add(o.at))
				top.Observe(o.key, o.size)
			}
			top.Advance(t0.Add(tc.at))
			got := top.Append(nil)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
			if top.Len() > tc.n {
				t.Fatalf("%d keys kept, bound %d", top.Len(), tc.n)
			}
		})
	}
}

func smalls(n int) []obs {
	out := make([]obs, n)
	for i := range out {
		out[i] = obs{0, fmt.Sprintf("s%d", i), uint64(1000 + i)}
	}
	return out
}

// TestTopDoesNotKeepAliasedKeys: Observe copies what it keeps, as the agent
// passes keys that alias its datagram buffer.
func TestTopDoesNotKeepAliasedKeys(t *testing.T) {
	top := New(4, time.Minute)
	buf := []byte("blob")
	top.Observe(string(buf), 100) // string(buf) copies, so alias by hand
	k := []byte("hash")
	top.Observe(unsafeString(k), 200)
	copy(k, "zzzz")
	got := top.Append(nil)
	want := []agentlink.KeySize{{Key: "hash", Bytes: 200}, {Key: "blob", Bytes: 100}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestObserveKnownKeyDoesNotAllocate(t *testing.T) {
	top := New(32, time.Minute)
	for i := 0; i < 32; i++ {
		top.Observe(fmt.Sprintf("k%d", i), uint64(1000+i))
	}
	k := []byte("k7")
	small := []byte("tiny:1")
	if n := testing.AllocsPerRun(100, func() {
		top.Observe(unsafeString(k), 5000)
		top.Observe(unsafeString(small), 10) // under the smallest kept
	}); n != 0 {
		t.Errorf("Observe allocates %v times", n)
	}
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
