package proxy_test

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestWaitCountsTheClientsWrites: a master with one replica. Through the
// proxy (event loop and sessions) a client's writes go on shared
// connections, yet WAIT answers as Redis does for a direct client: 1 once
// the replica has the writes, and, while the replica is frozen (it stops
// acknowledging), 0 at the timeout, not the 1 a WAIT on a connection that
// wrote nothing gets at once. Argument errors are Redis' own.
func TestWaitCountsTheClientsWrites(t *testing.T) {
	skipShort(t)
	// Redis 7.0 (the tests') sets a connection's write offset after every
	// command, and the proxy lets Redis wait; on 7.2 and later it waits
	// itself: both paths, against the same Redis.
	for _, emulated := range []bool{false, true} {
		t.Run(fmt.Sprintf("emulated=%v", emulated), func(t *testing.T) {
			proxy.SetWaitEmulated(emulated)
			defer proxy.SetWaitEmulated(false)
			waitCountsTheClientsWrites(t)
		})
	}
}

func waitCountsTheClientsWrites(t *testing.T) {
	master := redistest.Standalone(t)
	replica := redistest.Standalone(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	eventually.True(t, 20*time.Second, "the replica is online", func() bool {
		info, _ := dialRaw(t, master.Addr).do("INFO", "replication")
		b, _ := info.([]byte)
		return strings.Contains(string(b), "state=online")
	})
	loop, _ := start(t, proxy.Config{Upstreams: []string{master.Addr}})
	sessions, _ := start(t, proxy.Config{Upstreams: []string{master.Addr}, NoEventLoop: true})
	targets := []struct{ name, addr string }{{"direct", master.Addr}, {"event loop", loop}, {"sessions", sessions}}

	// run plays cmds on a fresh connection and returns the replies.
	run := func(addr string, cmds ...[]string) string {
		rc := dialRaw(t, addr)
		var out []string
		for _, c := range cmds {
			v, err := rc.do(c...)
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			out = append(out, fmt.Sprintf("%v %v", v, err))
		}
		return strings.Join(out, " | ")
	}
	set := []string{"SET", "k", "v"}
	for _, tg := range targets {
		if got, want := run(tg.addr, set, []string{"WAIT", "1", "0"}), "OK <nil> | 1 <nil>"; got != want {
			t.Errorf("%s: SET, WAIT 1 0 = %s, want %s", tg.name, got, want)
		}
		errs := run(tg.addr, []string{"WAIT", "x", "0"}, []string{"WAIT", "1", "-1"}, []string{"WAIT", "1", "x"},
			[]string{"WAIT", "1"}, []string{"WAITAOF", "0", "0", "0"}, []string{"WAIT", "-1", "0"})
		if want := run(master.Addr, []string{"WAIT", "x", "0"}, []string{"WAIT", "1", "-1"}, []string{"WAIT", "1", "x"},
			[]string{"WAIT", "1"}, []string{"WAITAOF", "0", "0", "0"}, []string{"WAIT", "-1", "0"}); errs != want {
			t.Errorf("%s: argument errors %s, want %s", tg.name, errs, want)
		}
	}

	// The replica stops acknowledging.
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := replica.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	for _, tg := range targets {
		began := time.Now()
		got := run(tg.addr, set, []string{"WAIT", "1", "300"})
		took := time.Since(began)
		if want := "OK <nil> | 0 <nil>"; got != want {
			t.Errorf("%s, replica frozen: SET, WAIT 1 300 = %s (after %v), want %s", tg.name, got, took, want)
		}
		// Redis waits the whole timeout: so must the proxy (a lower bound
		// only, which a loaded machine cannot break).
		if took < 300*time.Millisecond {
			t.Errorf("%s, replica frozen: WAIT 1 300 answered after %v", tg.name, took)
		}
	}
	// A WAIT that waits for ever ends when the replica comes back.
	type result struct{ got string }
	done := make(chan result, len(targets))
	for _, tg := range targets {
		go func() { done <- result{tg.name + ": " + run(tg.addr, set, []string{"WAIT", "1", "0"})} }()
	}
	thaw()
	for range targets {
		select {
		case r := <-done:
			if !strings.HasSuffix(r.got, "OK <nil> | 1 <nil>") {
				t.Errorf("replica back: %s, want SET OK, WAIT 1", r.got)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("WAIT 1 0 not answered 30s after the replica came back")
		}
	}
}
