package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// pipe is one end of an in-memory connection; the other end is closed
// with the test.
func pipe(t *testing.T) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { b.Close() })
	return a
}

// closed reports whether c was closed (an open pipe's write fails on its
// deadline, already past, instead).
func closed(c net.Conn) bool {
	c.SetWriteDeadline(time.Now())
	_, err := c.Write([]byte{0})
	return errors.Is(err, io.ErrClosedPipe)
}

// TestSwitchClosesEveryRegisteredConnection: a switch closes what was
// registered to the old address, refuses a dial that completes to it
// afterwards, bumps the generation and runs the hooks; a connection closed
// by its owner leaves the registry; a switch to the same address closes
// nothing.
func TestSwitchClosesEveryRegisteredConnection(t *testing.T) {
	m := NewMaster("a:1")
	var moved []string
	hooks := 0
	m.Attach(func(addr string) { moved = append(moved, addr) }, func() { hooks++ })

	kept, err := m.Track("a:1", pipe(t))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := m.Track("a:1", pipe(t))
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	if changed, unfenced, n := m.Switch("a:1"); changed || unfenced || n != 0 {
		t.Fatalf("Switch to the same address: %v %v %d", changed, unfenced, n)
	}
	gen := m.Gen()
	changed, _, n := m.Switch("b:2")
	if !changed || n != 1 {
		t.Fatalf("Switch: changed %v, closed %d; want true, 1 (the other left the registry)", changed, n)
	}
	if !closed(kept.Conn) {
		t.Error("a connection to the old master is still open after the switch")
	}
	if m.Gen() == gen || hooks != 1 || len(moved) != 1 || moved[0] != "b:2" || m.Addr() != "b:2" {
		t.Errorf("after the switch: gen %d→%d, closed hook %d, moved %v, addr %s", gen, m.Gen(), hooks, moved, m.Addr())
	}
	late := pipe(t)
	if _, err := m.Track("a:1", late); !errors.Is(err, ErrSwitched) || !closed(late) {
		t.Errorf("a dial to the old master completing after the switch: %v (closed %v), want ErrSwitched and closed", err, closed(late))
	}
}

// TestFenceRefusesUntilSwitch: a fence closes every registered
// connection, refuses dials and registrations, is not raised twice, and a
// switch to the same master lifts it.
func TestFenceRefusesUntilSwitch(t *testing.T) {
	m := NewMaster("a:1")
	c, err := m.Track("a:1", pipe(t))
	if err != nil {
		t.Fatal(err)
	}
	if fenced, n := m.Fence(); !fenced || n != 1 || !closed(c.Conn) || !m.Fenced() {
		t.Fatalf("Fence: %v %d, conn closed %v", fenced, n, closed(c.Conn))
	}
	if fenced, _ := m.Fence(); fenced {
		t.Error("a second fence reported as new")
	}
	dialed := 0
	dial := func(context.Context, string) (net.Conn, error) { dialed++; return pipe(t), nil }
	if _, err := m.Dial(context.Background(), dial); !errors.Is(err, ErrFenced) || dialed != 0 {
		t.Errorf("Dial while fenced: %v after %d dials, want ErrFenced before dialing", err, dialed)
	}
	if changed, unfenced, _ := m.Switch("a:1"); changed || !unfenced || m.Fenced() {
		t.Fatalf("Switch to the same master: changed %v unfenced %v fenced %v", changed, unfenced, m.Fenced())
	}
	got, err := m.Dial(context.Background(), dial)
	if err != nil || dialed != 1 {
		t.Fatalf("Dial after the fence: %v (%d dials)", err, dialed)
	}
	if _, n := m.Fence(); n != 1 || !closed(got) {
		t.Errorf("a dialed connection is not registered: fence closed %d", n)
	}
}
