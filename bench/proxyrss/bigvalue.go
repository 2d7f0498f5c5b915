package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The large-request scenarios: one SET of a value of tens or hundreds of
// MiB, and a client that announces a huge value, sends most of it as fast
// as the proxy takes it, and hangs up. They measure what the proxy holds
// of a client's own large command (the reply direction is "large").

// valueReader yields n bytes of a fixed pseudo-random pattern (1 MiB
// repeated, shifted by one byte per repetition so that no two MiB are
// equal), without holding n bytes.
type valueReader struct {
	n, off int64
	block  []byte
}

func newValueReader(n int64) *valueReader {
	b := make([]byte, 1<<20)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return &valueReader{n: n, block: b}
}

func (v *valueReader) Read(p []byte) (int, error) {
	if v.off >= v.n {
		return 0, io.EOF
	}
	rep := v.off >> 20
	at := (v.off + rep) % int64(len(v.block))
	k := min(int64(len(p)), v.n-v.off, int64(len(v.block))-at)
	copy(p, v.block[at:at+k])
	v.off += k
	return int(k), nil
}

// bigSet SETs key to a value of mib MiB through the proxy, and checks the
// value's SHA-256 against a GET sent to Redis directly (so that reading it
// back does not count against the proxy).
func bigSet(addr, redisAddr, key string, mib int) string {
	n := int64(mib) << 20
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	start := time.Now()
	h := sha256.New()
	w := bufio.NewWriterSize(c, 256<<10)
	fmt.Fprintf(w, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, n)
	if _, err := io.Copy(w, io.TeeReader(newValueReader(n), h)); err != nil {
		return "write: " + err.Error()
	}
	w.WriteString("\r\n")
	if err := w.Flush(); err != nil {
		return "write: " + err.Error()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "reply: " + err.Error()
	}
	took := time.Since(start)
	if line != "+OK\r\n" {
		return fmt.Sprintf("reply %q", strings.TrimSpace(line))
	}
	check := "not checked"
	if redisAddr != "" {
		got, err := hashDirect(redisAddr, key)
		switch {
		case err != nil:
			check = "check: " + err.Error()
		case got == hex.EncodeToString(h.Sum(nil)):
			check = "value intact (SHA-256)"
		default:
			check = "VALUE DIFFERS"
		}
	}
	return fmt.Sprintf("+OK in %.1f s, %s", took.Seconds(), check)
}

// hashDirect GETs key from Redis and returns its value's SHA-256.
func hashDirect(addr, key string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintf(c, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
	r := bufio.NewReaderSize(c, 256<<10)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	size, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "$")), 10, 64)
	if err != nil || size < 0 {
		return "", fmt.Errorf("GET: %q", strings.TrimSpace(line))
	}
	h := sha256.New()
	if _, err := io.CopyN(h, r, size); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// abandon announces a SET of announced MiB, writes sent MiB of it as fast
// as the proxy takes them and closes the connection; then a new client
// checks through the proxy that the key does not exist and that the proxy
// still answers.
func abandon(addr, key string, announced, sent int) string {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err.Error()
	}
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	start := time.Now()
	w := bufio.NewWriterSize(c, 256<<10)
	fmt.Fprintf(w, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, int64(announced)<<20)
	_, err = io.Copy(w, newValueReader(int64(sent)<<20))
	if err == nil {
		err = w.Flush()
	}
	took := time.Since(start)
	c.Close()
	if err != nil {
		return "write: " + err.Error()
	}
	// The next client, through the proxy.
	d, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "next client: " + err.Error()
	}
	defer d.Close()
	d.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(d, "*2\r\n$6\r\nEXISTS\r\n$%d\r\n%s\r\n*1\r\n$4\r\nPING\r\n", len(key), key)
	r := bufio.NewReader(d)
	ex, err1 := r.ReadString('\n')
	pong, err2 := r.ReadString('\n')
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("next client: %v %v", err1, err2)
	}
	return fmt.Sprintf("%d of %d MiB sent in %.1f s, then closed; next client: EXISTS %s, PING %s", sent, announced,
		took.Seconds(), strings.TrimSpace(ex), strings.TrimSpace(pong))
}

// heldSet sends MSET key <mib MiB> key2 x through the proxy: its keys
// follow the value, so the proxy holds it whole (up to a quarter of its
// memory ceiling) or refuses it.
func heldSet(addr, key string, mib int) string {
	n := int64(mib) << 20
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	w := bufio.NewWriterSize(c, 256<<10)
	fmt.Fprintf(w, "*5\r\n$4\r\nMSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, n)
	if _, err := io.Copy(w, newValueReader(n)); err != nil {
		return "write: " + err.Error()
	}
	fmt.Fprintf(w, "\r\n$%d\r\n%s2\r\n$1\r\nx\r\n", len(key)+1, key)
	if err := w.Flush(); err != nil {
		return "write: " + err.Error()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "reply: " + err.Error()
	}
	line = strings.TrimSpace(line)
	if len(line) > 60 {
		line = line[:60] + "…"
	}
	return "reply " + line
}
