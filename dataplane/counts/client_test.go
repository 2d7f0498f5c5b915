package counts

import (
	"net"
	"strings"
	"testing"
	"time"
	"unsafe"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// listen opens a real UDP socket for the client to send to.
func listen(t *testing.T) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// receive reads datagrams until want entries arrived or 5s pass, summing the
// counts per key.
func receive(t *testing.T, pc net.PacketConn, want int) map[string][3]uint32 {
	t.Helper()
	got := map[string][3]uint32{}
	buf := make([]byte, sidecarlink.MaxDatagram+1)
	n := 0
	for n < want {
		_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		l, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %d of %d entries: %v", n, want, err)
		}
		var d sidecarlink.Decoder
		b, err := d.Decode(buf[:l])
		if err != nil {
			t.Fatalf("client sent a bad batch: %v", err)
		}
		for _, e := range b.Entries {
			k := string(b.Policy) + " " + string(e.Key)
			c := got[k]
			got[k] = [3]uint32{c[0] + e.Reads, c[1] + e.Writes, c[2] + e.Bytes}
			n++
		}
	}
	return got
}

func TestClientAggregatesAndFlushesOnTick(t *testing.T) {
	pc := listen(t)
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 1000; i++ {
		c.Observe("ns/p", "hot", 1, 0, 10)
	}
	c.Observe("ns/p", "cold", 0, 1, 5)
	c.Observe("ns/q", "hot", 2, 0, 0)
	// The flush loop must have its ticker registered before we step.
	eventually.True(t, 5*time.Second, "the client's flush loop registers its ticker", clk.HasWaiters)
	clk.Step(100 * time.Millisecond)
	got := receive(t, pc, 3)
	want := map[string][3]uint32{"ns/p hot": {1000, 0, 10000}, "ns/p cold": {0, 1, 5}, "ns/q hot": {2, 0, 0}}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// The receiver can read a datagram before the sender counts it.
	eventually.True(t, 5*time.Second, "two batches counted", func() bool { return c.Stats().Batches >= 2 })
	if s := c.Stats(); s.Observed != 1002 || s.Dropped != 0 || s.Batches != 2 {
		t.Errorf("stats = %+v", s)
	}
}

func TestClientSplitsLargeFlushIntoDatagrams(t *testing.T) {
	pc := listen(t)
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 3000
	for i := 0; i < n; i++ {
		c.Observe("ns/p", "key:"+strings.Repeat("x", i%50)+string(rune('a'+i%26))+itoa(i), 1, 0, 0)
	}
	c.Flush()
	got := receive(t, pc, n)
	if len(got) != n {
		t.Errorf("received %d distinct keys, want %d", len(got), n)
	}
	if s := c.Stats(); s.Batches < 2 {
		t.Errorf("stats = %+v, want several datagrams", s)
	}
}

func TestClientBoundsMemoryAndDrops(t *testing.T) {
	pc := listen(t)
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{FlushInterval: time.Hour, MaxKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 10000; i++ {
		c.Observe("ns/p", "k"+itoa(i), 1, 0, 0)
	}
	c.Observe("ns/p", "", 1, 0, 0)
	c.Observe("ns/p", strings.Repeat("k", sidecarlink.MaxKeyLen+1), 1, 0, 0)
	s := c.Stats()
	if s.Observed > 64 || s.Observed+s.Dropped != 10002 {
		t.Errorf("stats = %+v, want at most 64 buffered and the rest dropped", s)
	}
}

func TestClientDetectorAway(t *testing.T) {
	pc := listen(t)
	addr := pc.LocalAddr().String()
	pc.Close() // nobody listens any more
	c, err := NewClient(addr, ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Loopback reports the refused port on a later send; keep sending until
	// it does, which proves failures are counted and never block or panic.
	eventually.True(t, 5*time.Second, "a send error counted", func() bool {
		c.Observe("ns/p", "k", 1, 0, 0)
		c.Flush()
		return c.Stats().SendErrors > 0
	})
	if s := c.Stats(); s.SendErrors == 0 || s.LostEntries == 0 {
		t.Errorf("stats = %+v, want send errors counted", s)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Observe("ns/p", "k", 1, 0, 0) // after Close: dropped, no panic
}

func TestNewClientRejectsBadOptions(t *testing.T) {
	if _, err := NewClient("127.0.0.1:1", ClientOptions{MaxDatagram: 100}); err == nil {
		t.Error("a datagram limit too small for one entry was accepted")
	}
	if _, err := NewClient("no-port", ClientOptions{}); err == nil {
		t.Error("an address without a port was accepted")
	}
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

func BenchmarkObserve(b *testing.B) {
	benchObserve(b, func(c *Client, key string) { c.Observe("shop/checkout", key, 1, 0, 64) })
}

// benchObserve runs observe in parallel over 1,024 keys of a client that
// sends to a UDP socket nobody reads.
func benchObserve(b *testing.B, observe func(c *Client, key string)) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "product:" + itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			observe(c, keys[i&1023])
			i++
		}
	})
}

func TestClientCopiesKeys(t *testing.T) {
	pc := listen(t)
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := []byte("product:1")
	c.Observe("ns/p", unsafe.String(&buf[0], len(buf)), 1, 0, 0)
	copy(buf, "XXXXXXXXX")
	c.Flush()
	if got := receive(t, pc, 1); got["ns/p product:1"] != [3]uint32{1, 0, 0} {
		t.Errorf("received %v: the client kept the caller's buffer", got)
	}
}

// TestClientKeepsLargestAccessSize: an entry carries the largest value of one
// access in the interval, not the sum (that is Bytes), and a call counting
// several accesses counts each at bytes ÷ accesses.
func TestClientKeepsLargestAccessSize(t *testing.T) {
	pc := listen(t)
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Observe("ns/p", "big", 1, 0, 100)
	c.Observe("ns/p", "big", 1, 0, 20<<20)
	c.Observe("ns/p", "big", 0, 1, 300)
	c.Observe("ns/p", "many", 10, 0, 5000) // ten reads of 500 bytes
	c.Flush()
	buf := make([]byte, sidecarlink.MaxDatagram+1)
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, _, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	var d sidecarlink.Decoder
	b, err := d.Decode(buf[:l])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]uint32{}
	for _, e := range b.Entries {
		got[string(e.Key)] = [2]uint32{e.Bytes, e.Size}
	}
	want := map[string][2]uint32{"big": {100 + 20<<20 + 300, 20 << 20}, "many": {5000, 500}}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: bytes, size = %v, want %v", k, got[k], v)
		}
	}
}
