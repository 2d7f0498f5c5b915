package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDialBackoff: after a refused dial, dials to that address wait for a
// delay that doubles from 20 ms to 500 ms (±20 %), failing at once with the
// last error meanwhile; a dial that works resets it.
func TestDialBackoff(t *testing.T) {
	var b backoff
	now := time.Unix(1000, 0)
	refused := errors.New("connection refused")
	if err := b.check("a", now); err != nil {
		t.Fatalf("first dial held back: %v", err)
	}
	want := []time.Duration{20, 40, 80, 160, 320, 500, 500}
	for i, d := range want {
		d *= time.Millisecond
		b.result("a", now, refused)
		if err := b.check("a", now.Add(d*4/5-time.Millisecond)); err != refused {
			t.Fatalf("failure %d: a dial %v later went ahead (delay %v ±20%%)", i+1, d*4/5, d)
		}
		if err := b.check("a", now.Add(d*6/5+time.Millisecond)); err != nil {
			t.Fatalf("failure %d: a dial %v later held back (delay %v ±20%%)", i+1, d*6/5, d)
		}
		if err := b.check("b", now); err != nil {
			t.Fatal("another address held back")
		}
		now = now.Add(d * 2)
	}
	b.result("a", now, nil)
	b.result("a", now, refused)
	if err := b.check("a", now.Add(25*time.Millisecond)); err != nil {
		t.Fatal("a dial that worked did not reset the delay")
	}
}

func TestAcceptRetry(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	for name, tc := range map[string]struct {
		err       error
		prev      time.Duration
		wantDelay time.Duration
		wantRetry bool
	}{
		"EMFILE, first":      {err: emfile, wantDelay: 5 * time.Millisecond, wantRetry: true},
		"EMFILE, again":      {err: emfile, prev: 40 * time.Millisecond, wantDelay: 80 * time.Millisecond, wantRetry: true},
		"EMFILE, at the cap": {err: emfile, prev: time.Second, wantDelay: time.Second, wantRetry: true},
		"ENFILE":             {err: syscall.ENFILE, wantDelay: 5 * time.Millisecond, wantRetry: true},
		"ENOBUFS":            {err: fmt.Errorf("accept: %w", syscall.ENOBUFS), wantDelay: 5 * time.Millisecond, wantRetry: true},
		"other error ends":   {err: errors.New("use of closed network connection")},
	} {
		d, retry := acceptRetry(tc.err, tc.prev)
		if diff := cmp.Diff([]any{tc.wantDelay, tc.wantRetry}, []any{d, retry}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}
