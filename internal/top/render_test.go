package top

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

func TestEllipsize(t *testing.T) {
	tests := map[string]struct {
		key   string
		width int
		want  string
	}{
		"fits":               {"product:1", 30, "product:1"},
		"exactly":            {"abcdef", 6, "abcdef"},
		"middle cut, even":   {"abcdefghij", 6, "abc…ij"},
		"middle cut, odd":    {"abcdefghij", 7, "abc…hij"},
		"keeps both ends":    {"product:catalogue:summer-sale:item:123456", 20, "product:ca…em:123456"},
		"control bytes":      {"a\x00b\r\n", 30, `a\x00b\x0d\x0a`},
		"escape sequence":    {"\x1b[2Jboom", 30, `\x1b[2Jboom`},
		"backslash":          {`a\b`, 30, `a\\b`},
		"one-column letters": {"catégorie:été", 30, "catégorie:été"},
		"cut between runes":  {"éééééééé", 5, "éé…éé"},
		"wide":               {"商品:1", 30, `\u{5546}\u{54c1}:1`},
		"bidi override":      {"a\u202eb", 30, `a\u{202e}b`},
		"combining mark":     {"e\u0301", 30, `e\u{0301}`},
		"C1 control":         {"a\u0085b", 30, `a\u{0085}b`},
		"binary":             {"\xff\xfe", 30, `\xff\xfe`},
		"never half escape":  {"\x00\x01\x02\x03", 10, `\x00…\x03`},
		"escape at the edge": {"ab\x00cdefgh", 7, `ab…efgh`},
		"width one":          {"abc", 1, "…"},
		"width zero":         {"abc", 0, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Ellipsize(tc.key, tc.width)
			if got != tc.want {
				t.Errorf("Ellipsize(%q, %d) = %q, want %q", tc.key, tc.width, got, tc.want)
			}
			if n := utf8.RuneCountInString(got); n > tc.width {
				t.Errorf("%q is %d columns, over %d", got, n, tc.width)
			}
		})
	}
}

func TestNumbers(t *testing.T) {
	counts := map[int64]string{0: "0", 999_999: "999999", 1_000_000: "1.00M", 12_340_000: "12.3M", 999_999_999: "1000M", 4_560_000_000: "4.56G"}
	for n, want := range counts {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
	sizes := map[int64]string{0: "0", 1023: "1023", 1024: "1.00Ki", 1536: "1.50Ki", 12_900_000: "12.3Mi", 5 << 30: "5.00Gi", 200 << 20: "200Mi"}
	for n, want := range sizes {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
		if len(Bytes(n)) > bytesW {
			t.Errorf("Bytes(%d) = %q is wider than its column", n, Bytes(n))
		}
	}
}

func TestMove(t *testing.T) {
	tests := map[string]struct {
		k    Key
		want string
	}{
		"none":     {Key{}, "-"},
		"cache":    {Key{Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache}}, "Coalesce+Cache"},
		"replicas": {Key{Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationReplicate}, Replicas: 4}, "Replicas=4"},
		"split":    {Key{Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}, Shards: 16}, "Split=16"},
		"others":   {Key{Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationPreAggregate, v1alpha1.MitigationRefreshAhead}}, "PreAgg+Refresh"},
	}
	for name, tc := range tests {
		if got := Move(tc.k); got != tc.want {
			t.Errorf("%s: Move = %q, want %q", name, got, tc.want)
		}
	}
}

var now = time.Date(2026, 12, 1, 14, 5, 3, 0, time.UTC)

// fixture is a policy in Enforce mode with two moved keys, one of which
// (a scheduled one) the report does not list, and a report of four keys.
func fixture() ([]v1alpha1.HotKeyPolicy, []v1alpha1.HotKeyReport) {
	since := metav1.NewTime(now.Add(-3*time.Minute - 2*time.Second))
	p := v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}}
	p.Spec.Mode = v1alpha1.ModeEnforce
	p.Status.HotKeyCount = 2
	p.Status.HotKeys = []v1alpha1.HotKeyStatus{
		{Key: "flash:sale", ReadsPerSecond: 0, Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationReplicate}, Replicas: 8, Source: v1alpha1.SourceScheduled, Since: &since},
		{Key: "product:viral-1", ReadsPerSecond: 48000, Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache}, Source: v1alpha1.SourceDetected, Since: &since},
	}
	r := v1alpha1.HotKeyReport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}, Spec: v1alpha1.HotKeyReportSpec{
		PolicyName: "checkout", Window: metav1.Duration{Duration: 10 * time.Second}, GeneratedAt: metav1.NewTime(now.Add(-4 * time.Second)), Nodes: 3,
		Candidates: []v1alpha1.Candidate{
			{Key: "likes:post:4", ReadsPerSecond: 100, WritesPerSecond: 1900, BytesPerSecond: 30_000, Exact: true},
			{Key: "product:viral-1", ReadsPerSecond: 48210, BytesPerSecond: 12_400_000, Exact: true},
			{Key: "session:\x00\xffbinary", ReadsPerSecond: 2600, BytesPerSecond: 900},
			{Key: "product:catalogue:summer-sale-2026:item:000123456", ReadsPerSecond: 2500, WritesPerSecond: 3, BytesPerSecond: 2_000_000, Exact: true},
		},
		// Sizes: one confirmed (larger in Redis than any read of it), one as
		// seen (a moved key the candidates lack), one found missing (no
		// size), one big key that is not hot (not shown).
		BigKeys: []v1alpha1.BigKey{
			{Key: "product:catalogue:summer-sale-2026:item:000123456", ValueBytes: 1_900_000, MemoryBytes: 2_400_000, Big: true},
			{Key: "blob:cold", ValueBytes: 900_000},
			{Key: "flash:sale", ValueBytes: 4096},
			{Key: "likes:post:4", ValueBytes: 20, Missing: true},
		},
	}}
	return []v1alpha1.HotKeyPolicy{p}, []v1alpha1.HotKeyReport{r}
}

func keysOf(p Policy) []string {
	var ks []string
	for _, k := range p.Keys {
		ks = append(ks, k.Key)
	}
	return ks
}

func TestBuildJoinsAndSorts(t *testing.T) {
	ps, rs := fixture()
	tests := map[string]struct {
		sort  string
		limit int
		want  []string
		more  int
	}{
		"heat: the report's order, moved keys it lacks last": {SortHeat, 0, []string{"likes:post:4", "product:viral-1", "session:\x00\xffbinary", "product:catalogue:summer-sale-2026:item:000123456", "flash:sale"}, 0},
		"reads":  {SortReads, 0, []string{"product:viral-1", "session:\x00\xffbinary", "product:catalogue:summer-sale-2026:item:000123456", "likes:post:4", "flash:sale"}, 0},
		"writes": {SortWrites, 2, []string{"likes:post:4", "product:catalogue:summer-sale-2026:item:000123456"}, 3},
		"bytes":  {SortBytes, 1, []string{"product:viral-1"}, 4},
		"size":   {SortSize, 3, []string{"product:catalogue:summer-sale-2026:item:000123456", "flash:sale", "likes:post:4"}, 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := Build(now, ps, rs, tc.sort, tc.limit)
			if len(f.Policies) != 1 {
				t.Fatalf("%d policies, want 1", len(f.Policies))
			}
			p := f.Policies[0]
			if d := cmp.Diff(tc.want, keysOf(p)); d != "" {
				t.Errorf("keys (-want +got):\n%s", d)
			}
			if p.More != tc.more {
				t.Errorf("More = %d, want %d", p.More, tc.more)
			}
		})
	}
	f := Build(now, ps, rs, SortHeat, 0)
	viral := f.Policies[0].Keys[1]
	if viral.ReadsPerSecond != 48210 || !viral.Exact || Move(viral) != "Coalesce+Cache" || viral.Since == nil || viral.Source != v1alpha1.SourceDetected {
		t.Errorf("product:viral-1 = %+v: want the report's rates with status's move", viral)
	}
	flash := f.Policies[0].Keys[4]
	if flash.Replicas != 8 || flash.Source != v1alpha1.SourceScheduled || flash.SizeBytes != 4096 || flash.SizeConfirmed {
		t.Errorf("flash:sale = %+v: want status's move, the size seen", flash)
	}
	if long := f.Policies[0].Keys[3]; long.SizeBytes != 2_400_000 || !long.SizeConfirmed {
		t.Errorf("%s = %+v: want the confirmed size", long.Key, long)
	}
	if likes := f.Policies[0].Keys[0]; likes.SizeBytes != 0 {
		t.Errorf("likes:post:4, found missing, = %+v: want no size", likes)
	}
}

func TestBuildPoliciesWithoutReportAndReportsWithoutPolicy(t *testing.T) {
	ps := []v1alpha1.HotKeyPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "new"}}}
	ps[0].Spec.Mode = v1alpha1.ModeObserve
	rs := []v1alpha1.HotKeyReport{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "gone"}, Spec: v1alpha1.HotKeyReportSpec{PolicyName: "gone", GeneratedAt: metav1.NewTime(now.Add(-90 * time.Second)), Nodes: 1}}}
	f := Build(now, ps, rs, SortHeat, 20)
	got := []string{}
	for _, p := range f.Policies {
		got = append(got, policyLine(now, p))
	}
	want := []string{
		"a/gone  (policy deleted)  report 90s old, 0s window, 1 node  moved 0",
		"b/new  Observe (moves not applied)  no report yet",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("policy lines (-want +got):\n%s", d)
	}
}

// TestTable pins the table drawn from the fixture at 80 columns: every line
// within 80, columns aligned, the long key cut in the middle, the binary one
// escaped, upper bounds marked and explained.
func TestTable(t *testing.T) {
	ps, rs := fixture()
	var b bytes.Buffer
	if err := Table(&b, Build(now, ps, rs, SortReads, 20), 80); err != nil {
		t.Fatal(err)
	}
	want := `heatsink top  2026-12-01T14:05:03Z  sort: reads

shop/checkout  Enforce  report 4s old, 10s window, 3 nodes  moved 2
KEY                      READS/s WRITES/s BYTES/s   SIZE MOVE              SINCE
product:viral-1            48210        0  11.8Mi      - Coalesce+Cache     3m2s
session:\x00\xffbinary     ~2600       ~0     900      - -                     -
product:cata…m:000123456    2500        3  1.91Mi 2.29Mi -                     -
likes:post:4                 100     1900  29.3Ki      - -                     -
flash:sale                     0        0       0 4.00Ki Replicas=8         3m2s

~ upper bound: the key is not counted exactly on every node yet
`
	if d := cmp.Diff(want, b.String()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	// Narrow or wide, every line fits; the key column takes the difference.
	for _, w := range []int{MinWidth, 120} {
		b.Reset()
		_ = Table(&b, Build(now, ps, rs, SortReads, 20), w)
		for _, l := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(l); n > w {
				t.Errorf("width %d: line of %d columns: %q", w, n, l)
			}
		}
	}
}

func TestJSONIsOneDocumentALine(t *testing.T) {
	ps, rs := fixture()
	var b bytes.Buffer
	for range 2 {
		if err := JSON(&b, Build(now, ps, rs, SortBytes, 2)); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (one document each):\n%s", len(lines), b.String())
	}
	var f struct {
		Time     time.Time
		Sort     string
		Policies []struct {
			Namespace, Name, Mode string
			HotKeyCount           int
			More                  int
			Report                struct{ Nodes int }
			Keys                  []map[string]any
		}
	}
	if err := json.Unmarshal([]byte(lines[0]), &f); err != nil {
		t.Fatal(err)
	}
	p := f.Policies[0]
	if !f.Time.Equal(now) || f.Sort != "bytes" || p.Namespace != "shop" || p.Name != "checkout" || p.Mode != "Enforce" || p.HotKeyCount != 2 || p.More != 3 || p.Report.Nodes != 3 {
		t.Errorf("frame = %+v", f)
	}
	if k := p.Keys[0]; k["key"] != "product:viral-1" || k["bytesPerSecond"] != 12_400_000.0 || k["exact"] != true ||
		k["since"] != "2026-12-01T14:02:01Z" || k["source"] != "Detected" {
		t.Errorf("first key = %v", k)
	}
	if k := p.Keys[1]; k["sizeBytes"] != 2_400_000.0 || k["sizeConfirmed"] != true {
		t.Errorf("second key = %v: want its confirmed size", k)
	}
	if _, ok := p.Keys[0]["sizeBytes"]; ok {
		t.Errorf("a key with no known size has sizeBytes: %v", p.Keys[0])
	}
}

// TestRedraw checks the frames' separation: after a blank line on a pipe,
// drawn over the last on a terminal (the first, too: top starts at the
// screen's top).
func TestRedraw(t *testing.T) {
	ps, rs := fixture()
	f := Build(now, ps, rs, SortHeat, 1)
	var one bytes.Buffer
	_ = Table(&one, f, 80)
	for name, tc := range map[string]struct {
		o    Options
		want string
	}{
		"pipe":     {Options{Width: 80}, one.String() + "\n" + one.String()},
		"terminal": {Options{Width: 80, Clear: true}, strings.Repeat("\x1b[H"+strings.ReplaceAll(one.String(), "\n", "\x1b[K\n")+"\x1b[J", 2)},
	} {
		var b bytes.Buffer
		for i := range 2 {
			if err := tc.o.write(&b, f, i == 0); err != nil {
				t.Fatal(err)
			}
		}
		if b.String() != tc.want {
			t.Errorf("%s: %q\nwant %q", name, b.String(), tc.want)
		}
	}
}
