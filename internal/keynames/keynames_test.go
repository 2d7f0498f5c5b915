package keynames

import (
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	k1 := PolicyKey([]byte("install"), "shop", "checkout")
	k2 := PolicyKey([]byte("install"), "shop", "other")
	raw := "user:alice@example.com"
	plain, hashed, trunc := New(Plain, k1), New(Hashed, k1), New(Truncated, k1)
	if got := plain.Name(raw); got != raw {
		t.Errorf("Plain: %q", got)
	}
	var nilNamer *Namer
	if got := nilNamer.Name(raw); got != raw {
		t.Errorf("nil Namer: %q", got)
	}
	h := hashed.Name(raw)
	if !strings.HasPrefix(h, Prefix) || len(h) != len(Prefix)+2*hashBytes || strings.Contains(h, "alice") {
		t.Errorf("Hashed: %q", h)
	}
	if h != New(Hashed, k1).Name(raw) {
		t.Error("Hashed is not stable under one key")
	}
	if h == New(Hashed, k2).Name(raw) {
		t.Error("two policies show one key the same way")
	}
	if h == hashed.Name("user:bob@example.com") {
		t.Error("two keys hash alike")
	}
	if got := trunc.Name(raw); got != "user:"+h {
		t.Errorf("Truncated: %q, want %q", got, "user:"+h)
	}
	long := strings.Repeat("x", MaxPrefix) + ":secret"
	if got := trunc.Name(long); got != hashed.Name(long) {
		t.Errorf("Truncated keeps a first segment of %d bytes: %q", MaxPrefix, got)
	}
	if got := trunc.Name("nocolon"); got != hashed.Name("nocolon") {
		t.Errorf("Truncated without a segment: %q", got)
	}
}

func TestEffective(t *testing.T) {
	for _, tc := range []struct{ policy, least, want Mode }{
		{"", "", Plain}, {Plain, "", Plain}, {Hashed, "", Hashed}, {Plain, Hashed, Hashed},
		{Truncated, Hashed, Hashed}, {Hashed, Truncated, Hashed}, {Plain, Truncated, Truncated},
	} {
		if got := Effective(tc.policy, tc.least); got != tc.want {
			t.Errorf("Effective(%q, %q) = %q, want %q", tc.policy, tc.least, got, tc.want)
		}
	}
}
