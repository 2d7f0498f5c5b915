package simproto

import "testing"

// TestHotShareConcentrates: with HotNodes set, the hot keys' operations go
// to that many nodes, every nodes/HotNodes-th, and all of them are handed
// out; without, to every node.
func TestHotShareConcentrates(t *testing.T) {
	const nodes, total = 1000, 5500
	for _, hot := range []int{0, 10, 1000} {
		sum, got := uint64(0), 0
		for node := range nodes {
			i, n, ok := hotShare(node, nodes, hot)
			if !ok {
				continue
			}
			got++
			if hot == 10 && node%100 != 0 {
				t.Fatalf("node %d gets hot traffic with 10 hot nodes of 1,000", node)
			}
			sum += share(total, i, n)
		}
		want := hot
		if hot == 0 {
			want = nodes
		}
		if got != want || sum != total {
			t.Fatalf("hot nodes %d: %d nodes get %d operations, want %d nodes and %d", hot, got, sum, want, total)
		}
	}
}
