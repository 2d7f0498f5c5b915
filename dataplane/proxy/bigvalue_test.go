package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// value yields n bytes of a pseudo-random pattern without holding them
// (1 MiB repeated, shifted by one byte per MiB so no two MiB are equal).
type value struct {
	n, off int64
	block  []byte
}

func newValue(n int64, seed uint32) *value {
	b := make([]byte, 1<<20)
	x := seed | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return &value{n: n, block: b}
}

func (v *value) Read(p []byte) (int, error) {
	if v.off >= v.n {
		return 0, io.EOF
	}
	at := (v.off + v.off>>20) % int64(len(v.block))
	k := min(int64(len(p)), v.n-v.off, int64(len(v.block))-at)
	copy(p, v.block[at:at+k])
	v.off += k
	return int(k), nil
}

func valueBytes(n int64, seed uint32) []byte {
	b, _ := io.ReadAll(newValue(n, seed))
	return b
}

// memory reads this process's VmRSS and VmHWM (peak RSS) in bytes.
func memory(t *testing.T) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		for name, dst := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak} {
			if v, ok := strings.CutPrefix(line, name); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				*dst = kb << 10
			}
		}
	}
	return rss, peak
}

// resetPeak gives memory back and resets VmHWM to the current RSS, so
// that the peak read afterwards is the work's own.
func resetPeak(t *testing.T) int64 {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	rss, _ := memory(t)
	return rss
}

// setRaw writes SET key <n bytes of value seed> on c without holding the
// value, and returns the value's SHA-256.
func setRaw(t *testing.T, c net.Conn, key string, n int64, seed uint32) [32]byte {
	t.Helper()
	h := sha256.New()
	w := bufio.NewWriterSize(c, 256<<10)
	fmt.Fprintf(w, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, n)
	if _, err := io.Copy(w, io.TeeReader(newValue(n, seed), h)); err != nil {
		t.Fatal(err)
	}
	w.WriteString("\r\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// getHash sends GET key on c and returns the SHA-256 and length of the
// value, read as it comes.
func getHash(t *testing.T, c net.Conn, r *bufio.Reader, key string) ([32]byte, int64) {
	t.Helper()
	fmt.Fprintf(c, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "$")), 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("GET %s: %q", key, line)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, r, n); err != nil {
		t.Fatal(err)
	}
	if crlf, err := r.Discard(2); err != nil || crlf != 2 {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil)), n
}

// A 150 MB SET through the proxy with a 64 MiB memory limit succeeds, the
// value reads back intact, and the process's peak RSS grows by far less
// than the value (before, the proxy held it whole, at several times its
// size). A client that announces 500 MB, sends 400 MB fast and hangs up
// costs as little; Redis gets no partial key, keeps no partial command,
// and the next client is served. Event loop and sessions alike.
func TestLargeValueStreamed(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(64 << 20))
	const bound = 48 << 20 // what the work may add to the peak RSS
	for _, noLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("sessions-only=%v", noLoop), func(t *testing.T) {
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, NoEventLoop: noLoop})
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReaderSize(c, 256<<10)

			base := resetPeak(t)
			const size = 150_000_000
			sum := setRaw(t, c, "big", size, 1)
			if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
				t.Fatalf("SET of %d bytes: %q %v", size, line, err)
			}
			got, n := getHash(t, c, r, "big")
			if n != size || got != sum {
				t.Fatalf("the value read back (%d bytes) differs from the one written", n)
			}
			_, peak := memory(t)
			t.Logf("150 MB SET and GET: peak RSS %+d MiB", (peak-base)>>20)
			if peak-base > bound {
				t.Errorf("a %d MB SET and GET raised the peak RSS by %d MiB (limit %d MiB)", size/1_000_000, (peak-base)>>20, bound>>20)
			}

			base = resetPeak(t)
			ab, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			w := bufio.NewWriterSize(ab, 256<<10)
			fmt.Fprintf(w, "*3\r\n$3\r\nSET\r\n$9\r\nabandoned\r\n$%d\r\n", 500_000_000)
			if _, err := io.Copy(w, newValue(400_000_000, 2)); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			ab.Close()
			// Redis drops the partial command with its connection.
			eventually.Succeeds(t, 30*time.Second, func() error {
				list, err := direct.ClientList(ctx).Result()
				if err != nil {
					return err
				}
				for _, f := range strings.Fields(list) {
					if v, ok := strings.CutPrefix(f, "qbuf="); ok && len(v) > 6 {
						return fmt.Errorf("a Redis client still holds a %s-byte query buffer", v)
					}
				}
				return nil
			})
			_, peak = memory(t)
			t.Logf("400 of 500 MB abandoned: peak RSS %+d MiB", (peak-base)>>20)
			if peak-base > bound {
				t.Errorf("400 of 500 MB abandoned raised the peak RSS by %d MiB (limit %d MiB)", (peak-base)>>20, bound>>20)
			}
			if n, err := direct.Exists(ctx, "abandoned").Result(); err != nil || n != 0 {
				t.Fatalf("Redis holds the abandoned key: EXISTS = %d, %v", n, err)
			}
			next := redis.NewClient(&redis.Options{Addr: addr})
			defer next.Close()
			if err := next.Set(ctx, "after", "ok", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := next.Get(ctx, "after").Result(); err != nil || v != "ok" {
				t.Fatalf("the next client: GET = %q, %v", v, err)
			}
			got, n = getHash(t, c, r, "big") // the first client too
			if n != size || got != sum {
				t.Fatal("the first value changed")
			}
		})
	}
}

// Large values among other commands of a pipeline keep the pipeline's
// order; options and further arguments after the value reach Redis; a
// RESP3 client is served the same.
func TestLargeValuePipelined(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	ctx := context.Background()
	big := string(valueBytes(3<<20, 3))
	for _, tc := range []struct {
		noLoop   bool
		protocol int
	}{{false, 2}, {true, 2}, {false, 3}} {
		t.Run(fmt.Sprintf("sessions-only=%v/RESP%d", tc.noLoop, tc.protocol), func(t *testing.T) {
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, NoEventLoop: tc.noLoop})
			c := redis.NewClient(&redis.Options{Addr: addr, Protocol: tc.protocol})
			defer c.Close()
			pipe := c.Pipeline()
			// A blocking command first: while the proxy waits for it, it
			// reads ahead from the client, into the large value.
			pipe.BLPop(ctx, 50*time.Millisecond, "nothing")
			pipe.Set(ctx, "n", 1, 0)
			pipe.Set(ctx, "big", big, time.Hour)
			incr := pipe.Incr(ctx, "n")
			pipe.HSet(ctx, "h", "a", big, "b", "small", "c", big)
			get := pipe.Get(ctx, "big")
			ttl := pipe.TTL(ctx, "big")
			hb := pipe.HGet(ctx, "h", "b")
			hc := pipe.HGet(ctx, "h", "c")
			pipe.RPush(ctx, "l", big, "x")
			llen := pipe.LLen(ctx, "l")
			if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			if incr.Val() != 2 || get.Val() != big || ttl.Val() <= 0 || hb.Val() != "small" || hc.Val() != big || llen.Val() < 2 {
				t.Fatalf("INCR %d, GET equal %v, TTL %v, HGET b %q, HGET c equal %v, LLEN %d", incr.Val(), get.Val() == big, ttl.Val(), hb.Val(), hc.Val() == big, llen.Val())
			}
			c.Del(ctx, "l")
		})
	}
}

// The rules for a large value that cannot be streamed: on a key the engine
// serves itself, held whole up to 4 MiB and refused above; a command whose
// keys follow the value, held whole up to half Config.MaxBuffered and refused
// above. A large value the engine would send raw anyway is streamed, and
// the key's cached copy dropped.
func TestLargeValueRules(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(mitigatedTable())
	v2, v5 := string(valueBytes(2<<20, 4)), string(valueBytes(5<<20, 5))
	for _, noLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("sessions-only=%v", noLoop), func(t *testing.T) {
			direct.FlushAll(ctx)
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng, NoEventLoop: noLoop, MaxBuffered: 8 << 20})
			c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
			defer c.Close()

			// A replicated key: the engine writes every copy.
			if err := c.Set(ctx, "page", v2, 0).Err(); err != nil {
				t.Fatalf("SET page <2 MiB>: %v", err)
			}
			for _, k := range append(routing.ReplicaKeys("page", 2), "page") {
				if v, _ := direct.Get(ctx, k).Result(); v != v2 {
					t.Fatalf("%s does not hold the 2 MiB value", k)
				}
			}
			err := c.Set(ctx, "page", v5, 0).Err()
			want := "ERR heatsink: SET with a value over 4 MiB on a key mitigated by replicate is not supported"
			if err == nil || err.Error() != want {
				t.Fatalf("SET page <5 MiB>: %v, want %q", err, want)
			}
			if v, _ := direct.Get(ctx, "page").Result(); v != v2 {
				t.Fatal("the refused SET changed the key")
			}
			// A typed write on a replicated key goes raw: streamed.
			if err := c.HSet(ctx, "page2", "f", v5).Err(); err != nil {
				t.Fatal(err)
			}
			if v, _ := direct.HGet(ctx, "page2", "f").Result(); v != v5 {
				t.Fatal("HSET page2 f <5 MiB> did not reach Redis intact")
			}
			// A cached key: streamed, and its cached copy dropped.
			c.Set(ctx, "hot", "old", 0)
			c.Get(ctx, "hot")
			if err := c.Set(ctx, "hot", v5, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, "hot").Result(); err != nil || v != v5 {
				t.Fatalf("GET hot after a streamed SET: %d bytes, %v", len(v), err)
			}
			// Keys after the value: held whole up to MaxBuffered/2.
			if err := c.MSet(ctx, "m1", v2, "m2", "x").Err(); err != nil {
				t.Fatal(err)
			}
			if v, _ := direct.Get(ctx, "m1").Result(); v != v2 {
				t.Fatal("MSET m1 <2 MiB> did not reach Redis intact")
			}
			err = c.MSet(ctx, "m1", v5, "m2", "y").Err()
			if err == nil || !strings.HasPrefix(err.Error(), "ERR heatsink proxy: MSET with an argument of ") {
				t.Fatalf("MSET m1 <5 MiB> over MaxBuffered/2: %v", err)
			}
			if v, _ := direct.Get(ctx, "m2").Result(); v != "x" {
				t.Fatal("the refused MSET changed a key")
			}
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("the connection after a refusal: %v", err)
			}
		})
	}
}

// In a cluster a large value goes to its key's node, streamed, and reads
// back intact.
func TestLargeValueCluster(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := context.Background()
	for _, noLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("sessions-only=%v", noLoop), func(t *testing.T) {
			addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs(), Cluster: true, NoEventLoop: noLoop})
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			for i, k := range []string{"a", "b", "c", "d"} {
				v := valueBytes(2<<20+int64(i), uint32(10+i))
				if err := c.Set(ctx, k, v, 0).Err(); err != nil {
					t.Fatalf("SET %s: %v", k, err)
				}
				if got, err := c.Get(ctx, k).Bytes(); err != nil || !bytes.Equal(got, v) {
					t.Fatalf("GET %s: %d bytes, %v", k, len(got), err)
				}
			}
		})
	}
}
