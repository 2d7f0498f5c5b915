package capture

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// cmd encodes args as a client sends them.
func cmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// parsed is one command as the parser emitted it.
type parsed struct {
	name, key string
	frame     int
}

// collect parses stream fed in pieces of at most step bytes (all at once
// if step is 0) and returns the commands with their first key.
func collect(stream []byte, step int, synced bool) (out []parsed, p *parser) {
	p = newParser(DefaultFlowBuffer, func(p *parser) {
		c := parsed{frame: p.frame}
		if len(p.args) > 0 && p.args[0] != nil {
			c.name = string(p.args[0])
		}
		if len(p.args) > 1 && p.args[1] != nil {
			c.key = string(p.args[1])
		}
		out = append(out, c)
	})
	if synced {
		p.startSynced()
	} else {
		p.gap()
	}
	if step == 0 {
		step = len(stream) + 1
	}
	for len(stream) > 0 {
		n := min(step, len(stream))
		p.feed(stream[:n])
		stream = stream[n:]
	}
	return out, p
}

func TestParserPipelinesInAnyPieces(t *testing.T) {
	stream := cmd("GET", "product:1") + cmd("SET", "product:2", strings.Repeat("v", 5000)) +
		cmd("MGET", "a", "b", "c") + "*0\r\n" + cmd("PING") + cmd("INCR", "likes")
	want := []string{"GET product:1", "SET product:2", "MGET a", "PING ", "INCR likes"}
	for _, step := range []int{0, 1, 2, 3, 7, 100, 1400} {
		got, _ := collect([]byte(stream), step, true)
		var names []string
		for _, c := range got {
			names = append(names, c.name+" "+c.key)
		}
		if strings.Join(names, "|") != strings.Join(want, "|") {
			t.Errorf("step %d: got %q, want %q", step, names, want)
		}
		if got[1].frame != len(cmd("SET", "product:2", strings.Repeat("v", 5000))) {
			t.Errorf("step %d: SET frame %d bytes", step, got[1].frame)
		}
	}
}

func TestParserKeepsNoPasswordNorValue(t *testing.T) {
	secret := "hunter2-secret"
	stream := cmd("AUTH", "default", secret) + cmd("HELLO", "3", "AUTH", "default", secret) +
		cmd("SET", "k", secret) + cmd("MIGRATE", "h", "1", "", "0", "5", "AUTH", secret, "KEYS", "k")
	for _, step := range []int{0, 1, 5} {
		got, p := collect([]byte(stream), step, true)
		if len(got) != 4 {
			t.Fatalf("step %d: %d commands", step, len(got))
		}
		if bytes.Contains(p.buf[:cap(p.buf)], []byte(secret)) {
			t.Errorf("step %d: the parser's buffer holds the secret", step)
		}
		for _, c := range got {
			if strings.Contains(c.key, secret) {
				t.Errorf("step %d: %s emitted the secret as an argument", step, c.name)
			}
		}
	}
}

func TestParserResynchronises(t *testing.T) {
	good := cmd("GET", "product:after")
	cases := map[string]struct {
		stream string
		synced bool
		want   int
	}{
		"inline commands, then multibulk":  {"PING\r\nGET x\r\n" + good + good, true, 2},
		"joined midway through a value":    {"alue-bytes\r\n" + good, false, 1},
		"joined at a boundary":             {good + good, false, 2},
		"garbage with a star":              {"*zz\r\n*3\r\n$3\r\nNOTACOMMAND\r\n" + good, true, 1},
		"unknown name at a boundary":       {"\r\n*2\r\n$5\r\nHELLX\r\n$1\r\nx\r\n" + good, false, 1},
		"a bad bulk terminator":            {"*2\r\n$3\r\nGET\r\n$1\r\nxYZ" + "\r\n" + good, true, 1},
		"a value that looks like commands": {cmd("SET", "k", "\r\n"+good+good) + good, true, 1},
	}
	for name, c := range cases {
		for _, step := range []int{0, 1, 4} {
			got, p := collect([]byte(c.stream), step, c.synced)
			n := 0
			for _, g := range got {
				if g.name == "GET" && g.key == "product:after" {
					n++
				}
			}
			if n != c.want {
				t.Errorf("%s, step %d: %d GET product:after, want %d (%+v, resyncs %d)", name, step, n, c.want, got, p.resyncs)
			}
		}
	}
}

func TestBoundary(t *testing.T) {
	for s, want := range map[string]bverdict{
		"*2\r\n$3\r\nGET\r\n": bYes,
		"*2\r\n$3\r\nget\r\n": bYes,
		"*2\r\n$3\r\nGE":      bMore,
		"*2\r\n$3\r\nGEX\r\n": bNo,
		"*0\r\n$3\r\nGET\r\n": bNo,
		"*2\r\n$30\r\n":       bNo,
		"*12345678\r\n":       bNo,
		"*2\r":                bMore,
		"*2\r\n":              bMore,
		"*2\r\n%3\r\nGET\r\n": bNo,
		"*2\r\n$3\r\nGET\r\r": bNo,
		"*a":                  bNo,
	} {
		if got := boundary([]byte(s)); got != want {
			t.Errorf("boundary(%q) = %d, want %d", s, got, want)
		}
	}
}
