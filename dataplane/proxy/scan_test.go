package proxy

import (
	"math"
	"testing"
)

// TestScanCursorRoundTrips checks the cursor encoding (scan.go): every
// position and node cursor that fits comes back as it went in, 0 stays the
// start, and a cursor of another slot map, position or garbage is refused.
func TestScanCursorRoundTrips(t *testing.T) {
	const tag = 0xbeef
	for _, n := range []int{1, 2, 3, 4, 5, 16, 1000} {
		for pos := range min(n, 8) {
			for _, nc := range []uint64{0, 1, 2, 255, 1 << 20, 1<<30 + 7, 1<<(48-bitsFor(n)) - 1} {
				if pos == 0 && nc == 0 {
					continue // the start: cursor 0
				}
				c, ok := encodeScan(pos, nc, n, tag)
				if !ok || c == 0 {
					t.Fatalf("encode(%d, %d, n=%d) = %d, %v", pos, nc, n, c, ok)
				}
				p, got, ok := decodeScan(c, n, tag)
				if !ok || p != pos || got != nc {
					t.Fatalf("decode(encode(%d, %d, n=%d)) = %d, %d, %v", pos, nc, n, p, got, ok)
				}
				if _, _, ok := decodeScan(c, n, tag+1); ok {
					t.Fatalf("cursor %d decoded with another slot map's tag", c)
				}
			}
		}
		if _, ok := encodeScan(0, 1<<(48-bitsFor(n)), n, tag); ok {
			t.Fatalf("n=%d: a node cursor too large for the encoding was encoded", n)
		}
	}
	if p, nc, ok := decodeScan(0, 3, tag); !ok || p != 0 || nc != 0 {
		t.Fatalf("cursor 0 = %d, %d, %v; want the start", p, nc, ok)
	}
	for _, garbage := range []uint64{1, 2, 3, 7, 12345, math.MaxUint64} {
		if _, _, ok := decodeScan(garbage, 3, tag); ok {
			t.Errorf("garbage cursor %d accepted", garbage)
		}
	}
	// A position beyond the node set (a cursor of a larger cluster with
	// the same tag) is refused.
	c, _ := encodeScan(3, 5, 4, tag)
	if _, _, ok := decodeScan(c, 3, tag); ok {
		t.Errorf("cursor for position 3 accepted by a 3-node set")
	}
	if tagOf(0) == 0 || tagOf(math.MaxUint64) == 0 || tagOf(65535) == 0 {
		t.Error("tag 0 made")
	}
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}
