package hub

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// MaxBigKeys bounds the keys a Snapshot lists by size.
const MaxBigKeys = 32

// bigKeys merges the fresh nodes' largest keys by size: a key's size is the
// largest any node saw (a value is one size wherever it is read), largest
// first, equal sizes by key, at most MaxBigKeys. Each node lists at most
// agentlink.MaxBigKeysPerPolicy, so this costs O(nodes × that) per
// snapshot, not O(keys).
func (v *view) bigKeys(now time.Time, maxAge time.Duration) []agentlink.KeySize {
	sizes := map[string]uint64{}
	for _, n := range v.nodes {
		if now.Sub(n.lastSeen) > maxAge {
			continue
		}
		for _, k := range n.bigKeys {
			sizes[k.Key] = max(sizes[k.Key], k.Bytes)
		}
	}
	if len(sizes) == 0 {
		return nil
	}
	out := make([]agentlink.KeySize, 0, len(sizes))
	for k, b := range sizes {
		out = append(out, agentlink.KeySize{Key: k, Bytes: b})
	}
	slices.SortFunc(out, func(a, b agentlink.KeySize) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(len(out), MaxBigKeys)]
}
