// Package top is `heatsink top`: a live view, for people, of the hottest
// keys of policies, read from the API (the policies' HotKeyReports, the
// manager's cluster-wide view, joined with the policies' status, what the
// manager did about each key). This file builds a frame from the objects;
// render.go draws it; follow.go keeps the objects up to date with a watch.
package top

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// Sort orders are the values of --sort.
const (
	// SortHeat keeps the report's order: hottest relative to its threshold
	// first (a key at 90 % of a low write threshold before one at 50 % of a
	// high read threshold), as the manager ranks them.
	SortHeat   = "heat"
	SortReads  = "reads"
	SortWrites = "writes"
	SortBytes  = "bytes"
	SortSize   = "size"
)

// Sorts are the valid --sort values, the default first.
var Sorts = []string{SortHeat, SortReads, SortWrites, SortBytes, SortSize}

// Frame is one refresh: every policy shown, at a time. It is also the JSON
// document `-o json` prints.
type Frame struct {
	Time     time.Time `json:"time"`
	Sort     string    `json:"sort"`
	Policies []Policy  `json:"policies"`
}

// Policy is one policy's part of a frame.
type Policy struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Mode is the policy's spec.mode; empty when the report outlived its
	// policy (it goes with it, soon).
	Mode string `json:"mode,omitempty"`
	// Report is about the HotKeyReport; nil when the manager wrote none yet.
	Report *Report `json:"report,omitempty"`
	// HotKeyCount is status.hotKeyCount: how many keys are moved (or, in
	// Observe mode, would be); Keys shows at most 50 of them.
	HotKeyCount int32 `json:"hotKeyCount"`
	// Keys are the keys shown, in the frame's sort order, at most the limit.
	Keys []Key `json:"keys"`
	// More is how many keys the limit left out.
	More int `json:"more,omitempty"`
}

// Report is what the report says of itself.
type Report struct {
	GeneratedAt           time.Time       `json:"generatedAt"`
	Window                metav1.Duration `json:"window"`
	Nodes                 int32           `json:"nodes"`
	UnseenReadsPerSecond  int64           `json:"unseenReadsPerSecond"`
	UnseenWritesPerSecond int64           `json:"unseenWritesPerSecond"`
}

// Key is one key: its rates (from the report, or from status for a moved key
// the report does not list) and the move applied to it (from status).
type Key struct {
	Key             string `json:"key"`
	ReadsPerSecond  int64  `json:"readsPerSecond"`
	WritesPerSecond int64  `json:"writesPerSecond"`
	BytesPerSecond  int64  `json:"bytesPerSecond"`
	// Exact is false when the rates are an upper bound (the key is not
	// counted exactly on every node yet).
	Exact       bool                      `json:"exact"`
	Mitigations []v1alpha1.MitigationType `json:"mitigations,omitempty"`
	Shards      int32                     `json:"shards,omitempty"`
	Replicas    int32                     `json:"replicas,omitempty"`
	Source      v1alpha1.HotKeySource     `json:"source,omitempty"`
	Since       *time.Time                `json:"since,omitempty"`
	// SizeBytes is the key's size when the report lists it among its big
	// keys: what MEMORY USAGE confirmed (bigKeys[].memoryBytes), and then
	// SizeConfirmed, else the largest value one access read or wrote
	// (bigKeys[].valueBytes); absent otherwise.
	SizeBytes     int64 `json:"sizeBytes,omitempty"`
	SizeConfirmed bool  `json:"sizeConfirmed,omitempty"`
	// Families are the families of the commands the key's clients sent
	// (string-read, counter, list/stream, script...), and Reason why a move
	// its heat asked for was not chosen (from status, else the report).
	Families []string `json:"families,omitempty"`
	Reason   string   `json:"reason,omitempty"`

	rank int // position in the report; moved keys it lacks come after
}

// Build joins policies and their reports (matched by namespace and
// spec.policyName) into a frame: per policy, its keys sorted by sortBy, at
// most limit (0: all). Policies are in namespace, name order.
func Build(now time.Time, policies []v1alpha1.HotKeyPolicy, reports []v1alpha1.HotKeyReport, sortBy string, limit int) Frame {
	type nsName struct{ ns, name string }
	byName := map[nsName]*Policy{}
	get := func(ns, name string) *Policy {
		p := byName[nsName{ns, name}]
		if p == nil {
			p = &Policy{Namespace: ns, Name: name, Keys: []Key{}}
			byName[nsName{ns, name}] = p
		}
		return p
	}
	moved := map[nsName][]v1alpha1.HotKeyStatus{}
	big := map[nsName]map[string]v1alpha1.BigKey{}
	for _, hp := range policies {
		p := get(hp.Namespace, hp.Name)
		p.Mode = string(cmp.Or(hp.Spec.Mode, v1alpha1.ModeObserve))
		p.HotKeyCount = hp.Status.HotKeyCount
		moved[nsName{hp.Namespace, hp.Name}] = hp.Status.HotKeys
	}
	for _, r := range reports {
		p := get(r.Namespace, cmp.Or(r.Spec.PolicyName, r.Name))
		p.Report = &Report{GeneratedAt: r.Spec.GeneratedAt.Time, Window: r.Spec.Window, Nodes: r.Spec.Nodes,
			UnseenReadsPerSecond: r.Spec.UnseenReadsPerSecond, UnseenWritesPerSecond: r.Spec.UnseenWritesPerSecond}
		bk := make(map[string]v1alpha1.BigKey, len(r.Spec.BigKeys))
		for _, k := range r.Spec.BigKeys {
			bk[k.Key] = k
		}
		big[nsName{p.Namespace, p.Name}] = bk
		for i, c := range r.Spec.Candidates {
			p.Keys = append(p.Keys, Key{Key: c.Key, ReadsPerSecond: c.ReadsPerSecond, WritesPerSecond: c.WritesPerSecond,
				BytesPerSecond: c.BytesPerSecond, Exact: c.Exact, Families: c.Families, Reason: c.Reason, rank: i})
		}
	}
	for id, hks := range moved {
		p := byName[id]
		at := make(map[string]int, len(p.Keys))
		for i, k := range p.Keys {
			at[k.Key] = i
		}
		for _, hk := range hks {
			i, ok := at[hk.Key]
			if !ok {
				// A moved key the report does not list (a scheduled key with no
				// traffic yet, or a report older than the status): status has its
				// rates, summed exactly (the hub counts moved keys exactly).
				p.Keys = append(p.Keys, Key{Key: hk.Key, ReadsPerSecond: hk.ReadsPerSecond, WritesPerSecond: hk.WritesPerSecond,
					Exact: true, rank: len(p.Keys) + 1<<20})
				i = len(p.Keys) - 1
			}
			k := &p.Keys[i]
			k.Mitigations, k.Shards, k.Replicas, k.Source = hk.Mitigations, hk.Shards, hk.Replicas, hk.Source
			if len(hk.Families) > 0 {
				k.Families, k.Reason = hk.Families, hk.Reason
			}
			if hk.Since != nil {
				t := hk.Since.Time
				k.Since = &t
			}
		}
	}
	f := Frame{Time: now.UTC().Truncate(time.Second), Sort: sortBy, Policies: []Policy{}}
	for id, p := range byName {
		for i := range p.Keys {
			k := &p.Keys[i]
			if b, ok := big[id][k.Key]; ok && !b.Missing {
				k.SizeBytes, k.SizeConfirmed = cmp.Or(b.MemoryBytes, b.ValueBytes), b.MemoryBytes > 0
			}
		}
		sortKeys(p.Keys, sortBy)
		if limit > 0 && len(p.Keys) > limit {
			p.More = len(p.Keys) - limit
			p.Keys = p.Keys[:limit]
		}
		f.Policies = append(f.Policies, *p)
	}
	slices.SortFunc(f.Policies, func(a, b Policy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return f
}

// sortKeys orders keys by sortBy, largest first; ties, and SortHeat, by
// the report's rank, then by key.
func sortKeys(keys []Key, sortBy string) {
	by := func(k Key) int64 {
		switch sortBy {
		case SortReads:
			return k.ReadsPerSecond
		case SortWrites:
			return k.WritesPerSecond
		case SortBytes:
			return k.BytesPerSecond
		case SortSize:
			return k.SizeBytes
		}
		return 0
	}
	slices.SortStableFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(by(b), by(a)), cmp.Compare(a.rank, b.rank), cmp.Compare(a.Key, b.Key))
	})
}

// ValidSort returns an error naming the valid values when s is not one.
func ValidSort(s string) error {
	if slices.Contains(Sorts, s) {
		return nil
	}
	return fmt.Errorf("--sort=%q: want one of %v", s, Sorts)
}
