// Command proxyrss measures the resident memory of a running heatsink
// proxy under the loads that used to make it grow without bound: deep
// pipelines from many clients, clients that never read their replies,
// thousands of idle connections, a flood of distinct keys, and large values
// read, written, and abandoned half-sent (bigvalue.go). It drives
// the proxy at -addr and samples /proc/<pid>/status of -pid (VmRSS) every
// 20 ms; it prints one Markdown table row per scenario.
//
//	proxyrss -addr 127.0.0.1:6380 -pid 1234 -redis 127.0.0.1:6379
//
// Every scenario is bounded in connections, commands and time.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6380", "proxy address")
	pid := flag.Int("pid", 0, "proxy process id (for /proc/<pid>/status)")
	redisAddr := flag.String("redis", "", "Redis address, to seed values directly")
	only := flag.String("only", "", "comma-separated scenarios to run (default all)")
	clients := flag.Int("pipeline-clients", 1000, "clients of the deep-pipeline scenario")
	depth := flag.Int("depth", 10000, "pipeline depth")
	stalled := flag.Int("stalled-clients", 100, "clients that never read")
	idle := flag.Int("idle", 5000, "idle connections")
	keys := flag.Int("keys", 2_000_000, "distinct keys of the flood")
	large := flag.Int("large-mib", 64, "size of the value the large-reply clients read, in MiB")
	bigSets := flag.String("bigset-mib", "60,150", "comma-separated sizes of the values SET by one client, in MiB")
	abandonMiB := flag.String("abandon-mib", "500:400", "announced:sent MiB of the value a client abandons")
	heldMiB := flag.String("held-mib", "40,100", "comma-separated sizes of the values of an MSET (held whole, or refused), in MiB")
	flag.Parse()
	if *pid == 0 {
		log.Fatal("-pid is required")
	}
	run := func(name string) bool { return *only == "" || strings.Contains(","+*only+",", ","+name+",") }
	m := &meter{pid: *pid}
	fmt.Println("| load | RSS before | RSS peak | RSS after (clients gone) | outcome |")
	fmt.Println("|---|---:|---:|---:|---|")
	if run("pipeline") {
		m.scenario(fmt.Sprintf("%d clients × %d-deep pipelines (SET, 2 rounds)", *clients, *depth), func() string {
			return pipelines(*addr, *clients, *depth, 2)
		})
	}
	if run("stalled") {
		if *redisAddr != "" {
			if err := seed(*redisAddr, "rss:big", strings.Repeat("v", 4096)); err != nil {
				log.Fatal(err)
			}
		}
		m.scenario(fmt.Sprintf("%d clients that never read, GET of a 4 KB value", *stalled), func() string {
			return nonReaders(*addr, *stalled, 10*time.Second)
		})
	}
	if run("idle") {
		m.scenario(fmt.Sprintf("%d idle connections", *idle), func() string {
			return idleConns(*addr, *idle)
		})
	}
	if run("large") && *redisAddr != "" {
		if err := seedLarge(*redisAddr, "rss:large", *large); err != nil {
			log.Fatal(err)
		}
		m.scenario(fmt.Sprintf("8 clients reading a %d MiB value at once", *large), func() string {
			return largeReaders(*addr, 8, *large)
		})
	}
	if run("bigset") {
		for _, f := range strings.Split(*bigSets, ",") {
			mib, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				log.Fatalf("-bigset-mib: %v", err)
			}
			m.scenario(fmt.Sprintf("one SET of a %d MiB value", mib), func() string {
				return bigSet(*addr, *redisAddr, "rss:bigset", mib)
			})
		}
	}
	if run("abandon") {
		a, s, ok := strings.Cut(*abandonMiB, ":")
		announced, err1 := strconv.Atoi(a)
		sent, err2 := strconv.Atoi(s)
		if !ok || err1 != nil || err2 != nil || sent > announced {
			log.Fatalf("-abandon-mib %q: want announced:sent", *abandonMiB)
		}
		m.scenario(fmt.Sprintf("a SET announcing %d MiB, %d MiB sent fast, then the client hangs up", announced, sent), func() string {
			return abandon(*addr, "rss:abandoned", announced, sent)
		})
	}
	if run("held") {
		for _, f := range strings.Split(*heldMiB, ",") {
			mib, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				log.Fatalf("-held-mib: %v", err)
			}
			m.scenario(fmt.Sprintf("one MSET of a %d MiB value and a small one", mib), func() string {
				return heldSet(*addr, "rss:held", mib)
			})
		}
	}
	if run("flood") {
		m.scenario(fmt.Sprintf("%d distinct keys (SET, pipelined)", *keys), func() string {
			return flood(*addr, *keys)
		})
	}
}

// meter samples a process's RSS.
type meter struct{ pid int }

func (m *meter) rss() int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(m.pid) + "/status")
	if err != nil {
		log.Fatalf("proxy process %d: %v", m.pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// scenario runs load while sampling RSS, then waits (bounded) for the RSS
// to settle once the load's connections are closed.
func (m *meter) scenario(name string, load func() string) {
	before := m.rss()
	var peak atomic.Int64
	peak.Store(before)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if r := m.rss(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	outcome := load()
	cancel()
	<-done
	// The proxy returns memory to the OS lazily (Go's scavenger): give it
	// up to 10 s, sampling the lowest value.
	after := m.rss()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		if r := m.rss(); r < after {
			after = r
		}
	}
	fmt.Printf("| %s | %s | %s | %s | %s |\n", name, mib(before), mib(peak.Load()), mib(after), outcome)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func seed(addr, key, val string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(c, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(val), val)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+OK\r\n" {
		return fmt.Errorf("seed: %q", line)
	}
	return nil
}

// replies reads n replies of the simple kinds these scenarios get (status,
// error, integer, bulk) and counts the error ones.
func replies(r *bufio.Reader, n int) (errs int, err error) {
	for i := 0; i < n; i++ {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return errs, err
		}
		switch line[0] {
		case '-':
			errs++
		case '$':
			size, _ := strconv.Atoi(strings.TrimSpace(string(line[1:])))
			if size >= 0 {
				if _, err := r.Discard(size + 2); err != nil {
					return errs, err
				}
			}
		}
	}
	return errs, nil
}

// pipelines runs clients, each sending rounds pipelines of depth SETs in
// one write and reading every reply.
func pipelines(addr string, clients, depth, rounds int) string {
	var wg sync.WaitGroup
	var errReplies, failed atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 30*time.Second)
			if err != nil {
				fail(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Minute))
			var req []byte
			for j := 0; j < depth; j++ {
				k := "rss:p:" + strconv.Itoa(i) + ":" + strconv.Itoa(j)
				req = fmt.Appendf(req, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n", len(k), k)
			}
			r := bufio.NewReaderSize(c, 64<<10)
			for round := 0; round < rounds; round++ {
				werr := make(chan error, 1)
				go func() { _, err := c.Write(req); werr <- err }()
				n, err := replies(r, depth)
				errReplies.Add(int64(n))
				if werr := <-werr; err == nil {
					err = werr
				}
				if err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	out := fmt.Sprintf("%d×%d×%d SETs in %.1f s; %d error replies, %d clients failed", clients, depth, rounds,
		time.Since(start).Seconds(), errReplies.Load(), failed.Load())
	if err, _ := firstErr.Load().(error); err != nil {
		out += " (" + err.Error() + ")"
	}
	return out
}

// nonReaders opens clients that send GETs of a 4 KB value as fast as the
// proxy takes them and never read, for d; then they close.
func nonReaders(addr string, clients int, d time.Duration) string {
	var wg sync.WaitGroup
	var sent atomic.Int64
	req := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$7\r\nrss:big\r\n", 256))
	stop := time.Now().Add(d)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			for time.Now().Before(stop) {
				c.SetWriteDeadline(stop)
				n, err := c.Write(req)
				sent.Add(int64(n / 25))
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d GETs written into the sockets in %s (the proxy reads only as much as it can hold)", sent.Load(), d)
}

// idleConns opens n connections, sends one PING on each, reads the PONG,
// and holds them for a few seconds.
func idleConns(addr string, n int) string {
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Sprintf("%d connections opened, then: %v", len(conns), err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, "PING\r\n"); err != nil {
			return fmt.Sprintf("connection %d: %v", i, err)
		}
		buf := make([]byte, 7)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "+PONG\r\n" {
			return fmt.Sprintf("connection %d: %q %v", i, buf, err)
		}
	}
	time.Sleep(3 * time.Second)
	return fmt.Sprintf("%d connections, each answered PING", len(conns))
}

// flood SETs n distinct keys through 8 connections, pipelined 1,000 deep.
func flood(addr string, n int) string {
	const conns, depth = 8, 1000
	var wg sync.WaitGroup
	var errReplies atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	per := n / conns
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Minute))
			r := bufio.NewReaderSize(c, 64<<10)
			var req []byte
			for done := 0; done < per; done += depth {
				req = req[:0]
				for j := done; j < done+depth && j < per; j++ {
					k := "rss:f:" + strconv.Itoa(i) + ":" + strconv.Itoa(j)
					req = fmt.Appendf(req, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n", len(k), k)
				}
				if _, err := c.Write(req); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				e, err := replies(r, min(depth, per-done))
				errReplies.Add(int64(e))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	out := fmt.Sprintf("%d SETs in %.1f s, %d error replies", n, time.Since(start).Seconds(), errReplies.Load())
	if err, _ := firstErr.Load().(error); err != nil && !errors.Is(err, io.EOF) {
		out += "; " + err.Error()
	}
	return out
}

// seedLarge writes a value of mib MiB directly to Redis, 1 MiB at a time.
func seedLarge(addr, key string, mib int) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	piece := strings.Repeat("v", 1<<20)
	r := bufio.NewReader(c)
	fmt.Fprintf(c, "*2\r\n$3\r\nDEL\r\n$%d\r\n%s\r\n", len(key), key)
	if _, err := r.ReadString('\n'); err != nil {
		return err
	}
	for range mib {
		fmt.Fprintf(c, "*3\r\n$6\r\nAPPEND\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(piece), piece)
		if _, err := r.ReadString('\n'); err != nil {
			return err
		}
	}
	return nil
}

// largeReaders has clients GET the large value at once, reading it in
// 64 KiB pieces, and checks its length.
func largeReaders(addr string, clients, mib int) string {
	var wg sync.WaitGroup
	var ok atomic.Int64
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Minute))
			fmt.Fprint(c, "*2\r\n$3\r\nGET\r\n$9\r\nrss:large\r\n")
			r := bufio.NewReaderSize(c, 64<<10)
			line, err := r.ReadString('\n')
			if err != nil || line != fmt.Sprintf("$%d\r\n", mib<<20) {
				return
			}
			if _, err := io.CopyN(io.Discard, r, int64(mib<<20)+2); err == nil {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d of %d clients read the %d MiB value whole in %.1f s", ok.Load(), clients, mib, time.Since(start).Seconds())
}
