// Package keynames decides how a Redis key is named where people read it
// (a policy's status, its HotKeyReport, its Events, the routing ConfigMap):
// as it is, or replaced by a keyed hash, so that a namespace's readers see
// which keys are hot without learning their names (often user ids, emails,
// tenant names). The data path never sees these names: it gets the raw keys
// from its node agent.
//
// The hash is an HMAC-SHA256 under a key of the policy's own, derived from
// the installation's key (a Secret in the manager's namespace), so a reader
// cannot find a name by hashing a dictionary of candidate keys, and the same
// key is shown the same way across manager restarts and in every object.
package keynames

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Mode is how a policy's key names are shown (spec.keyNames).
type Mode string

const (
	// Plain shows keys as they are.
	Plain Mode = "Plain"
	// Truncated keeps a key's first segment (up to and including its first
	// ':', when that is within MaxPrefix bytes) and hashes the rest:
	// "user:42@example.com" is shown as "user:h:<hex>".
	Truncated Mode = "Truncated"
	// Hashed shows only the hash: "h:<hex>".
	Hashed Mode = "Hashed"
)

// Prefix starts every hashed name, so a reader tells a hash from a key.
const Prefix = "h:"

// MaxPrefix bounds the segment Truncated keeps: a longer first segment is
// more likely to be the identifying part than a key's type.
const MaxPrefix = 32

// hashBytes is how much of the HMAC a name shows: 64 bits, so a policy's at
// most thousands of named keys collide with odds under 1 in 10^9.
const hashBytes = 8

// rank orders the modes by how much they hide.
func rank(m Mode) int {
	switch m {
	case Hashed:
		return 2
	case Truncated:
		return 1
	}
	return 0
}

// Effective is the mode a policy's keys are shown in: the policy's own or
// the installer's least (an empty one: none), whichever hides more.
func Effective(policy, least Mode) Mode {
	if rank(least) > rank(policy) {
		return least
	}
	if rank(policy) == 0 {
		return Plain
	}
	return policy
}

// PolicyKey is the HMAC key of one policy, derived from the installation's
// key: policies do not share one, so a name seen in one namespace says
// nothing about a name in another.
func PolicyKey(installKey []byte, namespace, name string) []byte {
	mac := hmac.New(sha256.New, installKey)
	mac.Write([]byte("heatsink.dev/key-names/v1\x00" + namespace + "\x00" + name))
	return mac.Sum(nil)
}

// Namer shows keys in one mode. The zero value (and a nil *Namer) shows
// them plain.
type Namer struct {
	mode Mode
	key  []byte
}

// New is a Namer of mode under policyKey (PolicyKey).
func New(mode Mode, policyKey []byte) *Namer {
	if rank(mode) == 0 {
		return &Namer{mode: Plain}
	}
	return &Namer{mode: mode, key: policyKey}
}

// Mode is the mode n shows keys in.
func (n *Namer) Mode() Mode {
	if n == nil || n.mode == "" {
		return Plain
	}
	return n.mode
}

// Hides says whether n shows anything but the raw key.
func (n *Namer) Hides() bool { return rank(n.Mode()) > 0 }

// Name is key as n shows it.
func (n *Namer) Name(key string) string {
	if !n.Hides() {
		return key
	}
	mac := hmac.New(sha256.New, n.key)
	mac.Write([]byte(key))
	h := Prefix + hex.EncodeToString(mac.Sum(nil)[:hashBytes])
	if n.mode == Truncated {
		if i := strings.IndexByte(key, ':'); i > 0 && i < MaxPrefix {
			return key[:i+1] + h
		}
	}
	return h
}
