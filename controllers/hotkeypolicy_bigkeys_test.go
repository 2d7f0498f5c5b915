package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/sizes"
)

func TestReportBigKeys(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ttl := 5 * time.Minute
	got := reportBigKeys([]agentlink.KeySize{{Key: "blob", Bytes: 20 << 20}, {Key: "hash", Bytes: 1 << 20}, {Key: "small", Bytes: 64}}, 1<<20, nil, now, ttl)
	want := []v1alpha1.BigKey{{Key: "blob", ValueBytes: 20 << 20, Big: true}, {Key: "hash", ValueBytes: 1 << 20, Big: true}, {Key: "small", ValueBytes: 64}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	if got := reportBigKeys(nil, 1<<20, nil, now, ttl); got != nil {
		t.Fatalf("no big keys gave %+v", got)
	}
	// Confirmed sizes: a hash read a field at a time (1,000 bytes a
	// reply) is 5 MB in Redis, so big and before a 2 MiB string; a key
	// found gone is last and not big; an answer older than the TTL is not
	// shown; a string overwritten by a small value since it was seen is
	// listed at its size now.
	seen := []agentlink.KeySize{{Key: "gone", Bytes: 8 << 20}, {Key: "str", Bytes: 2 << 20}, {Key: "shrunk", Bytes: 1 << 20}, {Key: "hash", Bytes: 1000}, {Key: "stale", Bytes: 900}}
	measured := map[string]sizes.Result{
		"gone":   {Missing: true, At: now},
		"hash":   {Bytes: 5_400_000, At: now.Add(-time.Minute)},
		"shrunk": {Bytes: 80, At: now},
		"stale":  {Bytes: 9 << 20, At: now.Add(-ttl)},
	}
	got = reportBigKeys(seen, 1<<20, measured, now, ttl)
	want = []v1alpha1.BigKey{
		{Key: "hash", ValueBytes: 1000, MemoryBytes: 5_400_000, Big: true},
		{Key: "str", ValueBytes: 2 << 20, Big: true},
		{Key: "stale", ValueBytes: 900},
		{Key: "shrunk", ValueBytes: 1 << 20, MemoryBytes: 80},
		{Key: "gone", ValueBytes: 8 << 20, Missing: true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("with confirmed sizes (-want +got):\n%s", d)
	}
}

func TestBigKeysChanged(t *testing.T) {
	base := []v1alpha1.BigKey{{Key: "a", ValueBytes: 1000, Big: true}, {Key: "b", ValueBytes: 500}}
	tests := map[string]struct {
		new  []v1alpha1.BigKey
		want bool
	}{
		"same":              {base, false},
		"size within 10 %":  {[]v1alpha1.BigKey{{Key: "a", ValueBytes: 1050, Big: true}, {Key: "b", ValueBytes: 500}}, false},
		"size moved > 10 %": {[]v1alpha1.BigKey{{Key: "a", ValueBytes: 2000, Big: true}, {Key: "b", ValueBytes: 500}}, true},
		"crossed":           {[]v1alpha1.BigKey{{Key: "a", ValueBytes: 1000, Big: true}, {Key: "b", ValueBytes: 500, Big: true}}, true},
		"key replaced":      {[]v1alpha1.BigKey{{Key: "a", ValueBytes: 1000, Big: true}, {Key: "c", ValueBytes: 500}}, true},
		"key gone":          {base[:1], true},
		"confirmed":         {[]v1alpha1.BigKey{{Key: "a", ValueBytes: 1000, MemoryBytes: 5000, Big: true}, {Key: "b", ValueBytes: 500}}, true},
		"found missing":     {[]v1alpha1.BigKey{{Key: "a", ValueBytes: 1000, Big: true}, {Key: "b", ValueBytes: 500, Missing: true}}, true},
	}
	for name, tc := range tests {
		if got := bigKeysChanged(base, tc.new); got != tc.want {
			t.Errorf("%s: changed = %v, want %v", name, got, tc.want)
		}
	}
}

func TestNewlyBig(t *testing.T) {
	big := []v1alpha1.BigKey{{Key: "a", ValueBytes: 2 << 20, Big: true}, {Key: "b", ValueBytes: 3 << 20, Big: true}, {Key: "c", ValueBytes: 10}}
	fresh, now := newlyBig(map[string]bool{"a": true, "gone": true}, big)
	if len(fresh) != 1 || fresh[0].Key != "b" {
		t.Fatalf("fresh = %+v, want only b", fresh)
	}
	if d := cmp.Diff(map[string]bool{"a": true, "b": true}, now); d != "" {
		t.Fatalf("over now (-want +got):\n%s", d)
	}
	if fresh, _ := newlyBig(now, big); len(fresh) != 0 {
		t.Fatalf("a key staying big raised again: %+v", fresh)
	}
	msg := bigKeysMessage([]v1alpha1.BigKey{{Key: "k1"}, {Key: "k2"}, {Key: "k3"}, {Key: "k4"}, {Key: "k5"}}, 1<<20)
	if !strings.HasPrefix(msg, "5 key(s) reached thresholds.valueBytes (1048576 bytes)") || !strings.Contains(msg, "and 2 more") || strings.Contains(msg, "k4") {
		t.Fatalf("message %q", msg)
	}
}
