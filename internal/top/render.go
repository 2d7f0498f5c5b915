package top

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// The table's columns beside KEY, whose width is what they leave of the
// line (24 in 80 columns). Numbers are right-aligned, so a column of
// rates reads as one.
const (
	readsW  = 7
	writesW = 8
	bytesW  = 7
	sizeW   = 6
	moveW   = 16
	sinceW  = 6
	// MinWidth is the narrowest line the table is drawn for; a narrower
	// terminal wraps.
	MinWidth = 64
)

// JSON writes f as one JSON document on one line: a script reads one frame
// a line.
func JSON(w io.Writer, f Frame) error {
	return json.NewEncoder(w).Encode(f)
}

// Table writes f as text at most width columns wide (at least MinWidth).
func Table(w io.Writer, f Frame, width int) error {
	width = max(width, MinWidth)
	keyW := width - (readsW + writesW + bytesW + sizeW + moveW + sinceW + 6)
	var b strings.Builder
	line := func(s string) { b.WriteString(clip(s, width) + "\n") }
	line(fmt.Sprintf("heatsink top  %s  sort: %s", f.Time.UTC().Format(time.RFC3339), f.Sort))
	if len(f.Policies) == 0 {
		line("no HotKeyPolicy here")
	}
	upper := false
	for _, p := range f.Policies {
		b.WriteString("\n")
		line(policyLine(f.Time, p))
		if len(p.Keys) == 0 {
			line("  no key near a threshold")
			continue
		}
		line(fmt.Sprintf("%-*s %*s %*s %*s %*s %-*s %*s", keyW, "KEY", readsW, "READS/s", writesW, "WRITES/s", bytesW, "BYTES/s", sizeW, "SIZE", moveW, "MOVE", sinceW, "SINCE"))
		for _, k := range p.Keys {
			mark := ""
			if !k.Exact {
				mark, upper = "~", true
			}
			since := "-"
			if k.Since != nil {
				since = duration.HumanDuration(f.Time.Sub(*k.Since))
			}
			size := "-"
			if k.SizeBytes > 0 {
				size = Bytes(k.SizeBytes)
			}
			line(fmt.Sprintf("%-*s %*s %*s %*s %*s %-*s %*s", keyW, Ellipsize(k.Key, keyW),
				readsW, mark+Count(k.ReadsPerSecond), writesW, mark+Count(k.WritesPerSecond), bytesW, Bytes(k.BytesPerSecond),
				sizeW, size, moveW, clip(Move(k), moveW), sinceW, since))
			if why := Why(k); why != "" {
				line("    " + why)
			}
		}
		if p.More > 0 {
			line(fmt.Sprintf("  … %d more (--limit)", p.More))
		}
	}
	if upper {
		b.WriteString("\n")
		line("~ upper bound: the key is not counted exactly on every node yet")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// policyLine is a policy's heading: which, its mode, how fresh its report
// is and what it covers, how many keys are moved.
func policyLine(now time.Time, p Policy) string {
	s := p.Namespace + "/" + p.Name
	switch p.Mode {
	case "":
		s += "  (policy deleted)"
	case string(v1alpha1.ModeObserve):
		s += "  Observe (moves not applied)"
	default:
		s += "  " + p.Mode
	}
	if p.Report == nil {
		return s + "  no report yet"
	}
	r := p.Report
	s += fmt.Sprintf("  report %s old, %s window, %d node", duration.HumanDuration(now.Sub(r.GeneratedAt)), duration.ShortHumanDuration(r.Window.Duration), r.Nodes)
	if r.Nodes != 1 {
		s += "s"
	}
	return s + fmt.Sprintf("  moved %d", p.HotKeyCount)
}

// Why is the line under a key saying what its clients send and, when a
// move its heat asked for was left out, why: "list/stream: list or stream
// (order-bearing, e.g. a queue): order forbids split". Empty when the
// manager knows neither.
func Why(k Key) string {
	s := strings.Join(k.Families, ",")
	if k.Reason != "" {
		s += ": " + k.Reason
	}
	return s
}

// Move is the table's short form of what is done to a key: its mitigations,
// cheapest first, with the replica count and the shard count.
func Move(k Key) string {
	if len(k.Mitigations) == 0 {
		return "-"
	}
	parts := make([]string, len(k.Mitigations))
	for i, m := range k.Mitigations {
		switch m {
		case v1alpha1.MitigationLocalCache:
			parts[i] = "Cache"
		case v1alpha1.MitigationReplicate:
			parts[i] = "Replicas=" + strconv.Itoa(int(k.Replicas))
		case v1alpha1.MitigationSplit:
			parts[i] = "Split=" + strconv.Itoa(int(k.Shards))
		case v1alpha1.MitigationPreAggregate:
			parts[i] = "PreAgg"
		case v1alpha1.MitigationRefreshAhead:
			parts[i] = "Refresh"
		default:
			parts[i] = string(m)
		}
	}
	return strings.Join(parts, "+")
}

// Count is a rate in at most 6 characters: exact below a million, then
// with an SI suffix (1.23M, 45.6M, 789G).
func Count(n int64) string {
	if n < 1_000_000 {
		return strconv.FormatInt(n, 10)
	}
	return scaled(float64(n), 1000, []string{"k", "M", "G", "T", "P", "E"})
}

// Bytes is a byte rate or a size in at most 6 characters: exact below 1 KiB, then
// with an IEC suffix as Kubernetes quantities write them (1.5Ki, 12.3Mi).
func Bytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10)
	}
	return scaled(float64(n), 1024, []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"})
}

func scaled(v, base float64, units []string) string {
	u := -1
	for v >= base && u < len(units)-1 {
		v /= base
		u++
	}
	switch {
	case v >= 99.95:
		return fmt.Sprintf("%.0f%s", v, units[u])
	case v >= 9.995:
		return fmt.Sprintf("%.1f%s", v, units[u])
	}
	return fmt.Sprintf("%.2f%s", v, units[u])
}

// Escape makes a key printable on one line of a terminal, one column a
// character: printable ASCII and printable one-column letters and symbols
// (catégorie:été) stay, a backslash is doubled; ASCII control characters
// (an escape sequence's ESC too) and bytes that are not UTF-8 (binary keys)
// become \xNN; other control and invisible characters (bidirectional
// overrides), combining marks and wide characters \u{NNNN}. So a key can
// neither move the cursor nor widen its column. It returns the rendering of
// each character, for Ellipsize to cut between.
func Escape(key string) []string {
	var out []string
	for i := 0; i < len(key); {
		r, n := utf8.DecodeRuneInString(key[i:])
		switch {
		case r == utf8.RuneError && n <= 1, r < 0x20, r == 0x7f:
			out = append(out, fmt.Sprintf(`\x%02x`, key[i]))
		case r == '\\':
			out = append(out, `\\`)
		case r >= 0x20 && r < 0x7f:
			out = append(out, key[i:i+n])
		case !unicode.IsPrint(r) || unicode.In(r, unicode.Mn, unicode.Me) || wide(r):
			out = append(out, fmt.Sprintf(`\u{%04x}`, r))
		default:
			out = append(out, key[i:i+n])
		}
		i += n
	}
	return out
}

// wide reports whether r takes two columns in a terminal.
func wide(r rune) bool {
	k := width.LookupRune(r).Kind()
	return k == width.EastAsianWide || k == width.EastAsianFullwidth
}

// Ellipsize escapes key and fits it in width columns: a longer one keeps its
// beginning and its end, which tell keys apart (product:…:1234), around a
// "…" in the middle. An escaped byte is never cut in half.
func Ellipsize(key string, width int) string {
	units := Escape(key)
	n := 0
	for _, u := range units {
		n += cols(u)
	}
	if n <= width {
		return strings.Join(units, "")
	}
	if width < 1 {
		return ""
	}
	room := width - 1 // the ellipsis
	headRoom := (room + 1) / 2
	var head, tail []string
	used := 0
	for _, u := range units {
		if used+cols(u) > headRoom {
			break
		}
		head, used = append(head, u), used+cols(u)
	}
	for i := len(units) - 1; i >= len(head); i-- {
		if used+cols(units[i]) > room {
			break
		}
		tail, used = append(tail, units[i]), used+cols(units[i])
	}
	var b strings.Builder
	b.WriteString(strings.Join(head, ""))
	b.WriteString("…")
	for i := len(tail) - 1; i >= 0; i-- {
		b.WriteString(tail[i])
	}
	return b.String()
}

// cols is how many columns an escaped unit takes: one a character.
func cols(u string) int { return utf8.RuneCountInString(u) }

// clip cuts s to width columns, ending in "…" when cut. s is escaped or
// this package's own text: one column a character.
func clip(s string, width int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}
