package sidecar

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want int64
	}{
		"v2 no limit": {"max\n", 0},
		"v2 limit":    {"268435456\n", 256 << 20},
		"v1 no limit": {"9223372036854771712\n", 0},
		"garbage":     {"lots", 0},
		"zero":        {"0", 0},
	} {
		if diff := cmp.Diff(tc.want, parseLimit(tc.in)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestParseMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		in      string
		want    int64
		wantErr bool
	}{
		"quantity":  {in: "192Mi", want: 192 << 20},
		"bytes":     {in: "268435456", want: 256 << 20},
		"too small": {in: "1Mi", wantErr: true},
		"garbage":   {in: "lots", wantErr: true},
		"default":   {in: "", want: DefaultMaxMemory()},
	} {
		got, err := ParseMemory(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v", name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}
