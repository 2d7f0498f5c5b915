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
