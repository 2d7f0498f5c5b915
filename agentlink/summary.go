package agentlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/heatsink-dev/heatsink/routing"
)

// Summary is one node agent's view of its node's traffic, sent every tick.
type Summary struct {
	// Node is the node's name.
	Node string
	// Session identifies the agent process (random at start): a restarted
	// agent's counts start over, and the manager forgets the old ones.
	Session uint64
	// Seq numbers the summaries of a session, so a late duplicate is ignored.
	Seq uint64
	// Policies holds one entry per policy the manager told the agent about.
	Policies []PolicySummary
}

// PolicySummary is one policy's traffic on one node.
type PolicySummary struct {
	// Policy is "<namespace>/<name>".
	Policy string
	// Directive is the version of the policy directive (floor, pins) the
	// agent applied when it computed this summary; 0 if none yet.
	Directive uint64
	// Unseen bounds every key this summary does not list: on this node, such
	// a key's read rate is below Unseen.Reads and its write rate below
	// Unseen.Writes (the floor, or the sketch's tracking level when that is
	// higher). Pinned keys are always listed, so Unseen never applies to them.
	Unseen Rates
	// Total is the policy's counted traffic on this node.
	Total Rates
	// Keys are the keys at or above the floor, and every pinned key this node
	// saw, with their rates.
	Keys []KeyRates
	// BigKeys are the node's largest keys by value size, largest first,
	// whatever their rates (a huge key read once an hour is listed): at
	// most MaxBigKeysPerPolicy.
	BigKeys []KeySize
	// Refused are the keys whose commands the node's sidecars refused
	// because of the key's move since the previous summary, with how many
	// (not the shed ones, not Redis' own errors), by key: at most
	// MaxRefusedKeysPerPolicy (version 4). The manager rolls back a move
	// its clients' commands are refused under.
	Refused []KeyCount
	// Moved are the keys a move served on the node's sidecars since the
	// previous summary, with the outcomes of those commands and the
	// baseline of the intervals they were served in (version 5): at most
	// MaxMovedKeysPerPolicy. The manager withdraws a move whose path fails
	// clearly more than the same sidecars' direct commands.
	Moved []KeyMoved
}

// KeyMoved are one key's commands served by its move on a node, those that
// failed on its path, and the baseline: the same sidecars' commands sent
// raw in the same intervals, and those that failed (sidecarlink.MoveCounts,
// summed).
type KeyMoved struct {
	Key                   string
	Served, Failed        uint64
	BaseTotal, BaseFailed uint64
	// ReadServed and ReadFailed are the reads among Served and Failed,
	// BaseReads and BaseReadsFailed among BaseTotal and BaseFailed
	// (version 6; zero before, and from sidecars that do not tell them).
	ReadServed, ReadFailed     uint64
	BaseReads, BaseReadsFailed uint64
}

// UnannouncedSummaryVersion is the newest summary version a manager that
// does not announce one (SummaryVersionHeader) reads: managers released
// before the header read versions 1 to 3, and reject a summary of a later
// one whole.
const UnannouncedSummaryVersion = 3

// SummaryVersionHeader is the header of the manager's answer to a node
// agent's watch request that names the newest summary version it reads,
// so that an agent of a later release than its manager (the upgrade rolls
// the DaemonSet and the manager's Deployment at once) writes what the
// manager reads (ManagerSummaryVersion).
const SummaryVersionHeader = "Heatsink-Summary-Version"

// SummaryVersion is the summary version this package writes and reads.
const SummaryVersion = summaryVersion

// ManagerSummaryVersion is the summary version to write to the manager
// whose watch answer carried header h: the version it announces, at most
// SummaryVersion, or UnannouncedSummaryVersion when it announces none (a
// manager of an earlier release) or one below that.
func ManagerSummaryVersion(h http.Header) int {
	v, err := strconv.Atoi(h.Get(SummaryVersionHeader))
	if err != nil || v < UnannouncedSummaryVersion {
		return UnannouncedSummaryVersion
	}
	return min(v, SummaryVersion)
}

// KeyCount is a count of one key.
type KeyCount struct {
	Key   string
	Count uint64
}

// KeySize is the largest value of one key that one access on a node read or
// wrote recently (a read's reply bytes, a write's request bytes).
type KeySize struct {
	Key   string
	Bytes uint64
}

// Rates are per-second rates.
type Rates struct {
	Reads  float64 `json:"reads"`
	Writes float64 `json:"writes"`
}

// KeyRates is one key's rates on one node.
type KeyRates struct {
	Key string
	// Reads and Writes are the window averages; RecentReads and
	// RecentWrites the rates over the last slot. Both are unbiased
	// estimates; the manager sums each over the nodes and takes the larger
	// sum (a key turning hot shows in the recent rates first). Taking the
	// larger per node instead would read high: for a key with few counts per
	// slot on each node, the larger of two noisy values overestimates, and
	// summing a thousand nodes adds the error up.
	Reads, Writes             float64
	RecentReads, RecentWrites float64
	// Bytes is value bytes read and written per second.
	Bytes float64
	// Pinned is set when the rates are exact counts (the key is pinned by
	// the directive the summary names), not the sketch's estimate.
	Pinned bool
	// Families are the command families the node's clients sent on the key
	// in the sketch's last one to two windows (0: none reported);
	// routing.FamUnknown from an agent of version 1 or 2.
	Families routing.Families
}

// Limits of a Summary, enforced by both sides.
const (
	MaxNodeLen       = 253
	MaxPolicyLen     = 317 // "<namespace>/<name>"
	MaxKeyLen        = 512
	MaxPolicies      = 1024
	MaxKeysPerPolicy = 8192
	// MaxBigKeysPerPolicy bounds a policy's BigKeys.
	MaxBigKeysPerPolicy = 64
	// MaxRefusedKeysPerPolicy bounds a policy's Refused.
	MaxRefusedKeysPerPolicy = 64
	// MaxMovedKeysPerPolicy bounds a policy's Moved: a move serves the
	// few mitigated keys.
	MaxMovedKeysPerPolicy = 256
	MaxSummaryBytes       = 32 << 20
	// summaryVersion is the version MarshalSummary writes; versions 1 (no
	// big keys, no families, no refusals), 2 (no families, no refusals)
	// 3 (no refusals), 4 (no move outcomes) and 5 (no reads among them)
	// are still read, from agents not yet upgraded.
	summaryVersion    = 6
	summaryHeaderSize = 4
	// rateScale: rates travel as unsigned integers in thousandths per second.
	rateScale = 1000
)

var summaryMagic = [2]byte{'H', 'F'}

// ErrMalformed is what every decoding error wraps.
var ErrMalformed = errors.New("malformed summary")

// MarshalSummary appends the binary form of s to buf. The layout (integers
// are unsigned LEB128 varints, rates in thousandths per second):
//
//	'H' 'F' version(1) flags(0)
//	node: len, bytes    session    seq    policy count
//	per policy: id len, bytes   directive   unseen reads, writes
//	            total reads, writes   key count
//	            per key: len, bytes   reads   writes   recent reads   recent writes
//	                     bytes/s   flags (bit 0: pinned)
//	                     families (version 3: routing.Families)
//	            big key count (version 2)
//	            per big key: len, bytes   size in bytes
//	            refused key count (version 4)
//	            per refused key: len, bytes   count
//	            moved key count (version 5)
//	            per moved key: len, bytes   served   failed   base total   base failed
//	                           read served   read failed   base reads   base reads failed (version 6)
//
// Binary because at 1,000 nodes the manager decodes hundreds of thousands
// of key rates per second; JSON would cost it a core.
func MarshalSummary(buf []byte, s *Summary) ([]byte, error) {
	return MarshalSummaryVersion(buf, s, summaryVersion)
}

// MarshalSummaryVersion is MarshalSummary in version v, for a manager that
// reads no later one (ManagerSummaryVersion): from
// UnannouncedSummaryVersion to the latest, v clamped into that range. A
// version 3 summary carries no refusals, a version 4 one no move outcomes,
// a version 5 one no reads among them.
func MarshalSummaryVersion(buf []byte, s *Summary, v int) ([]byte, error) {
	if err := s.validate(); err != nil {
		return buf, err
	}
	version := byte(min(max(v, UnannouncedSummaryVersion), summaryVersion))
	buf = append(buf, summaryMagic[0], summaryMagic[1], version, 0)
	buf = appendString(buf, s.Node)
	buf = binary.AppendUvarint(buf, s.Session)
	buf = binary.AppendUvarint(buf, s.Seq)
	buf = binary.AppendUvarint(buf, uint64(len(s.Policies)))
	for i := range s.Policies {
		p := &s.Policies[i]
		buf = appendString(buf, p.Policy)
		buf = binary.AppendUvarint(buf, p.Directive)
		buf = appendRate(buf, p.Unseen.Reads)
		buf = appendRate(buf, p.Unseen.Writes)
		buf = appendRate(buf, p.Total.Reads)
		buf = appendRate(buf, p.Total.Writes)
		buf = binary.AppendUvarint(buf, uint64(len(p.Keys)))
		for j := range p.Keys {
			k := &p.Keys[j]
			buf = appendString(buf, k.Key)
			buf = appendRate(buf, k.Reads)
			buf = appendRate(buf, k.Writes)
			buf = appendRate(buf, k.RecentReads)
			buf = appendRate(buf, k.RecentWrites)
			buf = appendRate(buf, k.Bytes)
			var flags byte
			if k.Pinned {
				flags = 1
			}
			buf = append(buf, flags)
			buf = binary.AppendUvarint(buf, uint64(k.Families))
		}
		buf = binary.AppendUvarint(buf, uint64(len(p.BigKeys)))
		for j := range p.BigKeys {
			buf = appendString(buf, p.BigKeys[j].Key)
			buf = binary.AppendUvarint(buf, p.BigKeys[j].Bytes)
		}
		if version < 4 {
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(p.Refused)))
		for j := range p.Refused {
			buf = appendString(buf, p.Refused[j].Key)
			buf = binary.AppendUvarint(buf, p.Refused[j].Count)
		}
		if version < 5 {
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(p.Moved)))
		for j := range p.Moved {
			m := &p.Moved[j]
			buf = appendString(buf, m.Key)
			buf = binary.AppendUvarint(buf, m.Served)
			buf = binary.AppendUvarint(buf, min(m.Failed, m.Served))
			buf = binary.AppendUvarint(buf, m.BaseTotal)
			buf = binary.AppendUvarint(buf, min(m.BaseFailed, m.BaseTotal))
			if version >= 6 {
				rs := min(m.ReadServed, m.Served)
				buf = binary.AppendUvarint(buf, rs)
				buf = binary.AppendUvarint(buf, min(m.ReadFailed, rs, m.Failed))
				br := min(m.BaseReads, m.BaseTotal)
				buf = binary.AppendUvarint(buf, br)
				buf = binary.AppendUvarint(buf, min(m.BaseReadsFailed, br, m.BaseFailed))
			}
		}
	}
	return buf, nil
}

func (s *Summary) validate() error {
	if len(s.Node) == 0 || len(s.Node) > MaxNodeLen {
		return fmt.Errorf("%w: node name of %d bytes", ErrMalformed, len(s.Node))
	}
	if len(s.Policies) > MaxPolicies {
		return fmt.Errorf("%w: %d policies", ErrMalformed, len(s.Policies))
	}
	for i := range s.Policies {
		p := &s.Policies[i]
		if len(p.Policy) == 0 || len(p.Policy) > MaxPolicyLen {
			return fmt.Errorf("%w: policy name of %d bytes", ErrMalformed, len(p.Policy))
		}
		if len(p.Keys) > MaxKeysPerPolicy {
			return fmt.Errorf("%w: %d keys for %s", ErrMalformed, len(p.Keys), p.Policy)
		}
		for j := range p.Keys {
			if l := len(p.Keys[j].Key); l == 0 || l > MaxKeyLen {
				return fmt.Errorf("%w: key of %d bytes", ErrMalformed, l)
			}
		}
		if len(p.BigKeys) > MaxBigKeysPerPolicy {
			return fmt.Errorf("%w: %d big keys for %s", ErrMalformed, len(p.BigKeys), p.Policy)
		}
		for j := range p.BigKeys {
			if l := len(p.BigKeys[j].Key); l == 0 || l > MaxKeyLen {
				return fmt.Errorf("%w: big key of %d bytes", ErrMalformed, l)
			}
		}
		if len(p.Refused) > MaxRefusedKeysPerPolicy {
			return fmt.Errorf("%w: %d refused keys for %s", ErrMalformed, len(p.Refused), p.Policy)
		}
		for j := range p.Refused {
			if l := len(p.Refused[j].Key); l == 0 || l > MaxKeyLen {
				return fmt.Errorf("%w: refused key of %d bytes", ErrMalformed, l)
			}
		}
		if len(p.Moved) > MaxMovedKeysPerPolicy {
			return fmt.Errorf("%w: %d moved keys for %s", ErrMalformed, len(p.Moved), p.Policy)
		}
		for j := range p.Moved {
			if l := len(p.Moved[j].Key); l == 0 || l > MaxKeyLen {
				return fmt.Errorf("%w: moved key of %d bytes", ErrMalformed, l)
			}
		}
	}
	return nil
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

func appendRate(buf []byte, r float64) []byte {
	switch {
	case !(r > 0): // also NaN
		r = 0
	case r > math.MaxUint64/(2*rateScale):
		r = math.MaxUint64 / (2 * rateScale)
	}
	return binary.AppendUvarint(buf, uint64(math.Round(r*rateScale)))
}

// UnmarshalSummary decodes a Summary. It never panics and refuses anything
// but exactly one well-formed summary (trailing bytes included).
func UnmarshalSummary(buf []byte) (*Summary, error) {
	if len(buf) > MaxSummaryBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(buf))
	}
	if len(buf) < summaryHeaderSize || buf[0] != summaryMagic[0] || buf[1] != summaryMagic[1] {
		return nil, fmt.Errorf("%w: bad header", ErrMalformed)
	}
	version := buf[2]
	if version < 1 || version > summaryVersion || buf[3] != 0 {
		return nil, fmt.Errorf("%w: version %d flags %#x", ErrMalformed, buf[2], buf[3])
	}
	d := decoder{p: buf[summaryHeaderSize:]}
	s := &Summary{}
	s.Node = d.str(MaxNodeLen, "node")
	s.Session = d.uv(math.MaxUint64, "session")
	s.Seq = d.uv(math.MaxUint64, "seq")
	np := d.count(MaxPolicies, 6, "policy count")
	if d.err == nil && np > 0 {
		s.Policies = make([]PolicySummary, 0, np)
	}
	for i := 0; i < np && d.err == nil; i++ {
		var p PolicySummary
		p.Policy = d.str(MaxPolicyLen, "policy")
		p.Directive = d.uv(math.MaxUint64, "directive")
		p.Unseen.Reads, p.Unseen.Writes = d.rate("unseen reads"), d.rate("unseen writes")
		p.Total.Reads, p.Total.Writes = d.rate("total reads"), d.rate("total writes")
		nk := d.count(MaxKeysPerPolicy, 6, "key count")
		if d.err == nil && nk > 0 {
			p.Keys = make([]KeyRates, 0, nk)
		}
		for j := 0; j < nk && d.err == nil; j++ {
			var k KeyRates
			k.Key = d.str(MaxKeyLen, "key")
			k.Reads, k.Writes = d.rate("reads"), d.rate("writes")
			k.RecentReads, k.RecentWrites = d.rate("recent reads"), d.rate("recent writes")
			k.Bytes = d.rate("bytes")
			switch f := d.byte("key flags"); f {
			case 0:
			case 1:
				k.Pinned = true
			default:
				d.fail(fmt.Sprintf("key flags %#x", f))
			}
			k.Families = routing.FamUnknown
			if version >= 3 {
				k.Families = routing.Families(d.uv(math.MaxUint32, "families"))
			}
			p.Keys = append(p.Keys, k)
		}
		if version >= 2 {
			nb := d.count(MaxBigKeysPerPolicy, 3, "big key count")
			if d.err == nil && nb > 0 {
				p.BigKeys = make([]KeySize, 0, nb)
			}
			for j := 0; j < nb && d.err == nil; j++ {
				k := KeySize{Key: d.str(MaxKeyLen, "big key")}
				k.Bytes = d.uv(math.MaxUint64, "big key size")
				p.BigKeys = append(p.BigKeys, k)
			}
		}
		if version >= 4 {
			nr := d.count(MaxRefusedKeysPerPolicy, 2, "refused key count")
			if d.err == nil && nr > 0 {
				p.Refused = make([]KeyCount, 0, nr)
			}
			for j := 0; j < nr && d.err == nil; j++ {
				k := KeyCount{Key: d.str(MaxKeyLen, "refused key")}
				k.Count = d.uv(math.MaxUint64, "refused count")
				p.Refused = append(p.Refused, k)
			}
		}
		if version >= 5 {
			nm := d.count(MaxMovedKeysPerPolicy, 6, "moved key count")
			if d.err == nil && nm > 0 {
				p.Moved = make([]KeyMoved, 0, nm)
			}
			for j := 0; j < nm && d.err == nil; j++ {
				k := KeyMoved{Key: d.str(MaxKeyLen, "moved key")}
				k.Served = d.uv(math.MaxUint64, "served")
				k.Failed = d.uv(k.Served, "failed")
				k.BaseTotal = d.uv(math.MaxUint64, "base total")
				k.BaseFailed = d.uv(k.BaseTotal, "base failed")
				if version >= 6 {
					k.ReadServed = d.uv(k.Served, "read served")
					k.ReadFailed = d.uv(min(k.ReadServed, k.Failed), "read failed")
					k.BaseReads = d.uv(k.BaseTotal, "base reads")
					k.BaseReadsFailed = d.uv(min(k.BaseReads, k.BaseFailed), "base reads failed")
				}
				p.Moved = append(p.Moved, k)
			}
		}
		s.Policies = append(s.Policies, p)
	}
	if d.err == nil && len(d.p) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.p)))
	}
	if d.err == nil && (s.Node == "" || hasEmpty(s)) {
		d.fail("empty name")
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}

func hasEmpty(s *Summary) bool {
	for _, p := range s.Policies {
		if p.Policy == "" {
			return true
		}
		for _, k := range p.Keys {
			if k.Key == "" {
				return true
			}
		}
		for _, k := range p.BigKeys {
			if k.Key == "" {
				return true
			}
		}
		for _, k := range p.Refused {
			if k.Key == "" {
				return true
			}
		}
		for _, k := range p.Moved {
			if k.Key == "" {
				return true
			}
		}
	}
	return false
}

// decoder reads fields until the first error, which it keeps.
type decoder struct {
	p   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
	d.p = nil
}

func (d *decoder) uv(max uint64, what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 || v > max {
		d.fail(what)
		return 0
	}
	d.p = d.p[n:]
	return v
}

// count reads a count of items that take at least minSize bytes each, and
// refuses counts the remaining bytes cannot hold (no allocation on lies).
func (d *decoder) count(max uint64, minSize int, what string) int {
	n := d.uv(max, what)
	if d.err == nil && n > uint64(len(d.p)/minSize) {
		d.fail(what + " exceeds the bytes left")
		return 0
	}
	return int(n)
}

func (d *decoder) str(max uint64, what string) string {
	l := d.uv(max, what)
	if d.err != nil {
		return ""
	}
	if uint64(len(d.p)) < l {
		d.fail(what + " truncated")
		return ""
	}
	s := string(d.p[:l])
	d.p = d.p[l:]
	return s
}

func (d *decoder) rate(what string) float64 {
	return float64(d.uv(math.MaxUint64, what)) / rateScale
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.p) == 0 {
		d.fail(what)
		return 0
	}
	b := d.p[0]
	d.p = d.p[1:]
	return b
}
