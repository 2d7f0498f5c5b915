package engine

import (
	"errors"
	"fmt"
	"time"
)

// The pure decisions of replica reads: a replica's lag from replication
// offsets, and which replica serves the next read.

// offsetSample is a master's replication offset at a moment.
type offsetSample struct {
	at     time.Time
	offset int64
}

// offsetHistory is a master's recent offsets, oldest first, at most
// historyLen of them (one per lag check).
type offsetHistory struct {
	samples []offsetSample
}

// historyLen bounds a shard's history: a replica further behind than the
// oldest sample is known to be at least that far behind, which is all a
// bound needs.
const historyLen = 64

func (h *offsetHistory) add(s offsetSample) {
	if n := len(h.samples); n > 0 && s.offset < h.samples[n-1].offset {
		// The offset went back: a new master (a failover, or a restart
		// that lost its history). Nothing older describes it.
		h.samples = h.samples[:0]
	}
	if len(h.samples) == historyLen {
		copy(h.samples, h.samples[1:])
		h.samples = h.samples[:historyLen-1]
	}
	h.samples = append(h.samples, s)
}

// lagOf is how far behind its master a replica is known to be, given the
// master's history (its last sample taken just before the replica's offset
// was read, at now): the replica lacks what the master had written at the
// first sample whose offset passes the replica's, so it is at least now
// minus that sample's time behind. A replica at or past the newest sample
// has lag 0. It is a lower bound, exact to one check interval: a replica
// is skipped only when it is certainly over the bound, and it is measured
// again at the next check. ok is false without any sample.
func lagOf(h []offsetSample, replica int64, now time.Time) (lag time.Duration, ok bool) {
	if len(h) == 0 {
		return 0, false
	}
	if replica >= h[len(h)-1].offset {
		return 0, true
	}
	for _, s := range h {
		if s.offset > replica {
			return max(now.Sub(s.at), 0), true
		}
	}
	return 0, true // unreachable: the newest sample passes replica
}

// pickReplica is the index of the replica that serves the next read: the
// (start mod usable)-th of the usable replicas, so successive starts spread
// reads evenly over the usable ones (a skipped replica's share is spread
// over all the others, not handed to its neighbour). lags[i] is replica
// i's last measured lag, negative when it is down or not measured yet;
// usable means 0 <= lag <= maxLag. It returns -1 when no replica is
// usable: the read goes to the master.
func pickReplica(lags []time.Duration, maxLag time.Duration, start uint64) int {
	usable := 0
	for _, l := range lags {
		if l >= 0 && l <= maxLag {
			usable++
		}
	}
	if usable == 0 {
		return -1
	}
	k := int(start % uint64(usable))
	for i, l := range lags {
		if l >= 0 && l <= maxLag {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}

// role is what ROLE answers about a node's replication.
type role struct {
	master bool
	// offset is a master's replication offset, or the offset a replica
	// has applied.
	offset int64
	// connected: a replica's link to its master is up (always true for a
	// master).
	connected bool
}

// parseRole decodes a ROLE reply as go-redis returns it: ["master",
// offset, [[ip, port, offset]...]] or ["slave", ip, port, state, offset].
// A replica that is not connected, or any other role (a Sentinel), is
// reported as such, never guessed.
func parseRole(v []any) (role, error) {
	if len(v) == 0 {
		return role{}, errors.New("ROLE: empty reply")
	}
	name, _ := v[0].(string)
	switch name {
	case "master":
		if len(v) < 2 {
			return role{}, errors.New("ROLE: short master reply")
		}
		off, ok := v[1].(int64)
		if !ok {
			return role{}, errors.New("ROLE: master offset is not an integer")
		}
		return role{master: true, offset: off, connected: true}, nil
	case "slave":
		if len(v) < 5 {
			return role{}, errors.New("ROLE: short replica reply")
		}
		state, _ := v[3].(string)
		off, ok := v[4].(int64)
		if !ok {
			return role{}, errors.New("ROLE: replica offset is not an integer")
		}
		return role{offset: off, connected: state == "connected"}, nil
	}
	return role{}, fmt.Errorf("ROLE: role %q is neither master nor replica", name)
}
