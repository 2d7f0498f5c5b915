package proxy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestConnStateKeepsLatestInOrder(t *testing.T) {
	var c connState
	for i := range 1000 {
		c.set(slotSelect, []byte{byte('0' + i%10)})
	}
	c.set(slotHello, []byte("HELLO 3 AUTH u p"))
	c.set(slotAuth, []byte("AUTH v q"))
	c.set(slotSelect, []byte("SELECT 4"))
	var got []string
	c.each(func(b []byte) { got = append(got, string(b)) })
	want := []string{"HELLO 3 AUTH u p", "AUTH v q", "SELECT 4"}
	if d := cmp.Diff(want, got); d != "" || c.len() != 3 {
		t.Fatalf("replay (-want +got):\n%s", d)
	}
	c.reset()
	if c.len() != 0 {
		t.Fatal("reset kept state")
	}
}

func TestConnStateUndoRestoresUnlessSetAgain(t *testing.T) {
	var c connState
	c.set(slotAuth, []byte("AUTH good"))
	c.set(slotSelect, []byte("SELECT 1"))
	bad := c.setUndoable(slotAuth, []byte("AUTH bad"), 2)
	c.undo(bad)
	var got []string
	c.each(func(b []byte) { got = append(got, string(b)) })
	if d := cmp.Diff([]string{"AUTH good", "SELECT 1"}, got); d != "" {
		t.Fatalf("after undo (-want +got):\n%s", d)
	}
	// A later AUTH (pipelined behind the refused one) is not taken back.
	bad = c.setUndoable(slotAuth, []byte("AUTH bad"), 2)
	c.set(slotAuth, []byte("AUTH later"))
	c.undo(bad)
	got = got[:0]
	c.each(func(b []byte) { got = append(got, string(b)) })
	if d := cmp.Diff([]string{"SELECT 1", "AUTH later"}, got); d != "" {
		t.Fatalf("undo after a later set (-want +got):\n%s", d)
	}
}
