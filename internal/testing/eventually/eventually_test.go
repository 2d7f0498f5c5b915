package eventually

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	final := errors.New("exited")
	for name, tc := range map[string]struct {
		cond    func(calls int) error
		wantErr string // "" means success
		maxCall int    // Poll must stop by then
	}{
		"holds at once":      {cond: func(int) error { return nil }, maxCall: 1},
		"holds on the third": {cond: func(n int) error { return map[bool]error{true: errors.New("not yet")}[n < 3] }, maxCall: 3},
		"permanent stops":    {cond: func(int) error { return Permanent(final) }, wantErr: "exited", maxCall: 1},
		"times out":          {cond: func(int) error { return errors.New("still cold") }, wantErr: "still cold"},
	} {
		t.Run(name, func(t *testing.T) {
			calls := 0
			err := Poll(context.Background(), 200*time.Millisecond, func() error { calls++; return tc.cond(calls) })
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Poll = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Poll = %v, want an error naming %q", err, tc.wantErr)
			case tc.maxCall > 0 && calls > tc.maxCall:
				t.Fatalf("cond called %d times, want at most %d", calls, tc.maxCall)
			}
		})
	}
}
