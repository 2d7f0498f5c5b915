package capture

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// TestAggTableCountsEveryKeyExactly checks the table against a map over
// intervals that grow it (many times its first size, the arena moving
// under keys already handed out), repeat keys, and hit the key bound.
func TestAggTableCountsEveryKeyExactly(t *testing.T) {
	var a aggTable
	for round, n := range []int{5000, 10, 3000, 0, 20000} {
		const maxKeys = 16384
		want := map[string]uint32{}
		dropped := 0
		for i := range 3 * n {
			k := fmt.Sprintf("r%d:key:%d", round%2, (i*7919)%n) // each key three times, interleaved
			e := a.entry([]byte(k), maxKeys)
			if e == nil {
				dropped++
				continue
			}
			e.Reads++
			want[k]++
		}
		if wantDropped := 3 * max(n-maxKeys, 0); dropped != wantDropped {
			t.Fatalf("round %d: %d dropped, want %d", round, dropped, wantDropped)
		}
		got := map[string]uint32{}
		for _, e := range a.entries {
			if _, dup := got[string(e.Key)]; dup {
				t.Fatalf("round %d: key %q twice", round, e.Key)
			}
			got[string(e.Key)] = e.Reads
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d keys, want %d", round, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("round %d: %q counted %d, want %d", round, k, got[k], v)
			}
		}
		a.reset()
		if len(a.entries) != 0 {
			t.Fatalf("round %d: %d entries after reset", round, len(a.entries))
		}
	}
}

func TestTrackerFlushScalesAndStartsOver(t *testing.T) {
	tr := newTracker(Limits{}, 4, 0)
	tr.setScope(scopeT)
	s := &stream{client: netip.AddrPortFrom(podA, 40000)}
	s.syn(tr)
	tr.packet(1, s.next(cmd("GET", "a")+cmd("SET", "a", "vv")+cmd("GET", "b")))
	got := totals(tr)
	if a, b := got["shop/p a"], got["shop/p b"]; a.Reads != 4 || a.Writes != 4 || a.Bytes != 4*uint32(len(cmd("SET", "a", "vv"))) || b.Reads != 4 {
		t.Fatalf("got %+v, want each count × 4", got)
	}
	tr.packet(2, s.next(cmd("GET", "b")))
	if got := totals(tr); len(got) != 1 || got["shop/p b"].Reads != 4 {
		t.Fatalf("second interval: %+v, want b's one read × 4 only", got)
	}
	if got := totals(tr); len(got) != 0 {
		t.Fatalf("an interval without commands: %+v", got)
	}
	var calls int
	tr.flush(func(string, []sidecarlink.Entry) { calls++ })
	if calls != 0 {
		t.Fatalf("sink called %d times for no keys", calls)
	}
}

// TestTrackerBatchCountsAsOneAtATime: counts added in batches (aggBatch),
// per packet or per ring block, are those added one at a time: the same keys counted
// and dropped over the key bound, the same read sizes, interleaving a
// connection whose replies are followed (its adds not deferred) with one
// whose replies are not, across flushes.
func TestTrackerBatchCountsAsOneAtATime(t *testing.T) {
	var ports []uint16 // one followed (1 in 2), one not
	for p := uint16(41000); len(ports) < 2; p++ {
		if Sampled(netip.AddrPortFrom(podA, p), 2) == (len(ports) == 0) {
			ports = append(ports, p)
		}
	}
	run := func(block int) (map[string]sidecarlink.Entry, TrackerStats) {
		tr := newTracker(Limits{MaxKeys: 5}, 1, 2)
		tr.unbatched = block < 0
		tr.setScope(scopeT)
		conns := []*conn{newConn(tr, ports[0]), newConn(tr, ports[1])}
		if conns[0].tr.flows[conns[0].cli].r == nil || conns[1].tr.flows[conns[1].cli].r != nil {
			t.Fatal("the sample is not one followed connection and one not")
		}
		all := map[string]sidecarlink.Entry{}
		merge := func() {
			for k, e := range totals(tr) {
				a := all[k]
				a.Reads, a.Writes, a.Bytes, a.Size = a.Reads+e.Reads, a.Writes+e.Writes, a.Bytes+e.Bytes, max(a.Size, e.Size)
				all[k] = a
			}
		}
		for i := range 300 {
			if block > 0 && i%block == 0 {
				tr.beginBlock()
			}
			c := conns[i%2]
			k := fmt.Sprintf("k%d", (i*7)%11)
			// Flushes between a read and its reply, which then makes its
			// key's entry in the next interval, with adds pending.
			flush := func() {
				if i%50 == 0 {
					merge()
				}
			}
			if i%50 == 25 {
				// A read taken, a flush before its reply, more new keys
				// than the bound pending when the reply makes its key's
				// entry in the next interval.
				merge()
				sk := fmt.Sprintf("s%d", i)
				conns[0].send(cmd("GET", sk))
				merge()
				for j := range 6 {
					conns[1].send(cmd("GET", fmt.Sprintf("o%d-%d", i, j)))
				}
				conns[0].reply("$2\r\nxy\r\n", 0)
			}
			if i%3 == 0 {
				c.send(cmd("SET", k, "value"))
				flush()
				c.reply("+OK\r\n", 0)
			} else {
				c.send(cmd("GET", k) + cmd("GET", k+"x"))
				flush()
				conns[1-i%2].send(cmd("GET", "other"+k))
				c.reply(fmt.Sprintf("$%d\r\n%s\r\n$-1\r\n", len(k)+i%4, k+"abc"[:i%4]), 0)
			}
			if block > 0 && (i%block == block-1 || i == 299) {
				tr.endBlock()
			}
		}
		merge()
		return all, tr.statsNow()
	}
	want, wantStats := run(-1)
	if wantStats.KeysDropped == 0 || wantStats.Replies == 0 {
		t.Fatalf("stats %+v: no key dropped or no reply sized, the test tests nothing", wantStats)
	}
	for _, block := range []int{0, 1, 7, 64, 300} {
		got, stats := run(block)
		if fmt.Sprint(got) != fmt.Sprint(want) || stats != wantStats {
			t.Errorf("blocks of %d packets: %v\n%+v\nwant %v\n%+v", block, got, stats, want, wantStats)
		}
	}
}
