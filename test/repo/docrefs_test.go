package repo

// The documentation names flags, fields and files; this test fails when one
// of them does not exist, so a page cannot keep a name the code dropped or
// renamed. It reads every docs/*.md and README.md.
//
// What counts as a reference, and what it is checked against:
//
//  1. A heatsink command line: in a code span or a line of a shell block
//     (a fence marked sh, bash, shell or console), a command whose first
//     word is `heatsink` (optionally with a directory: bin/heatsink), at the
//     start of the span or line (after a `$ ` prompt
//     and VAR=value assignments) or after |, ;, &&, ||, (, sudo or exec. Its
//     next word must be a subcommand of `heatsink --help`, and every --flag
//     after it on that command (backslash continuations joined; the command
//     ends at |, ;, &, ), # or the span's end) must be in that subcommand's
//     `--help`. --help itself is always allowed.
//  2. A lone flag: a code span that is exactly one --flag or --flag=value.
//     It must be a flag of some heatsink subcommand: a page writes another
//     tool's flag with its command (`kubectl apply --server-side`), which
//     rule 1 then leaves alone.
//  3. A field path: a code span of two or more dot-separated lowerCamel
//     names (`spec.thresholds.readsPerSecond`, `mitigations.split.maxShards`,
//     `hotKeys[].key`). One that starts with spec or status must be a path of
//     the HotKeyPolicy or HotKeyReport schema (config/crd/bases); one that
//     starts with the name of an object field of either schema (target,
//     mitigations, split, hotKeys, ...) must continue as one such field does.
//     Any other dotted name (a Go identifier, a Helm value, a file name) is
//     not a field path. Fenced YAML blocks of kind HotKeyPolicy or
//     HotKeyReport are checked key by key the same way.
//  4. A repository path: a relative Markdown link (its file must exist and
//     its #fragment, on a .md page, must be one of that page's headings), or
//     a word of a code span or fenced block that contains a slash and whose
//     first segment is a top-level entry git tracks (`hack/bench.sh`,
//     `dataplane/proxy/tls.go`, `config/crd/bases/*.yaml`,
//     `dataplane/watch.Watcher`: a Go identifier after the package is allowed,
//     as is a trailing /...). Words with placeholders (<x>, {x}, $X) and
//     paths outside the repository's tracked top level (bin/, /etc/...,
//     ../ in code, which is relative to wherever the reader's file is) are
//     not checked.
//
// The flags come from the binary built from this tree (`heatsink <sub>
// --help`), so flags bound by libraries (the logger's, --kubeconfig) count.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// docFinding is one reference that does not resolve.
type docFinding struct {
	Line int
	Ref  string
	Why  string
}

func (f docFinding) String() string { return fmt.Sprintf("line %d: %s: %s", f.Line, f.Ref, f.Why) }

// refChecker holds what the references are checked against.
type refChecker struct {
	root    string
	topHalf map[string]bool            // top-level entries git tracks
	flags   map[string]map[string]bool // subcommand -> its flags
	allFlag map[string]bool            // every subcommand's flags
	schemas []*schemaNode              // HotKeyPolicy, HotKeyReport roots
	anchors map[string][]*schemaNode   // object fields under spec/status, by name
}

// schemaNode is one object of a CRD's OpenAPI schema; arrays are walked
// through to their items.
type schemaNode struct {
	name     string
	children map[string]*schemaNode
	open     bool // preserves unknown fields, or a map
}

var (
	checkerOnce sync.Once
	checkerVal  *refChecker
	checkerErr  error
)

// docChecker builds the checker once per test binary: it builds heatsink.
func docChecker(t *testing.T) *refChecker {
	t.Helper()
	checkerOnce.Do(func() { checkerVal, checkerErr = newRefChecker(root(t), t.TempDir()) })
	if checkerErr != nil {
		t.Fatal(checkerErr)
	}
	return checkerVal
}

func newRefChecker(root, tmp string) (*refChecker, error) {
	c := &refChecker{root: root, topHalf: map[string]bool{}, flags: map[string]map[string]bool{},
		allFlag: map[string]bool{}, anchors: map[string][]*schemaNode{}}
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Fields(string(out)) {
		c.topHalf[strings.Split(f, "/")[0]] = true
	}

	bin := filepath.Join(tmp, "heatsink")
	build := exec.Command("go", "build", "-o", bin, "./cmd/heatsink")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/heatsink: %v\n%s", err, b)
	}
	help, err := exec.Command(bin, "--help").Output()
	if err != nil {
		return nil, fmt.Errorf("heatsink --help: %w", err)
	}
	_, cmds, _ := strings.Cut(string(help), "Commands:\n")
	sc := bufio.NewScanner(strings.NewReader(cmds))
	flagLine := regexp.MustCompile(`^\s+--([A-Za-z0-9][A-Za-z0-9_.-]*)`)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(sc.Text(), "  ") {
			break
		}
		sub := f[0]
		c.flags[sub] = map[string]bool{"help": true, "h": true}
		if sub == "help" {
			continue
		}
		out, err := exec.Command(bin, sub, "--help").Output()
		if err != nil {
			return nil, fmt.Errorf("heatsink %s --help: %w", sub, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if m := flagLine.FindStringSubmatch(l); m != nil {
				c.flags[sub][m[1]] = true
				c.allFlag[m[1]] = true
			}
		}
	}
	if len(c.flags) < 3 {
		return nil, fmt.Errorf("heatsink --help lists %d commands; want manager, node-agent, sidecar...:\n%s", len(c.flags), help)
	}

	crds, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return nil, fmt.Errorf("no CRD in config/crd/bases: %v", err)
	}
	for _, f := range crds {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd struct {
			Spec struct {
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, v := range crd.Spec.Versions {
			n := schemaOf("", v.Schema.OpenAPIV3Schema)
			c.schemas = append(c.schemas, n)
			for _, top := range []string{"spec", "status"} {
				if s := n.children[top]; s != nil {
					s.index(c.anchors)
				}
			}
		}
	}
	return c, nil
}

func schemaOf(name string, s map[string]any) *schemaNode {
	n := &schemaNode{name: name, children: map[string]*schemaNode{}}
	for {
		items, ok := s["items"].(map[string]any)
		if !ok {
			break
		}
		s = items
	}
	if p, _ := s["x-kubernetes-preserve-unknown-fields"].(bool); p {
		n.open = true
	}
	if _, ok := s["additionalProperties"]; ok {
		n.open = true
	}
	props, _ := s["properties"].(map[string]any)
	for k, v := range props {
		if m, ok := v.(map[string]any); ok {
			n.children[k] = schemaOf(k, m)
		}
	}
	return n
}

// index records every object field beneath n by name.
func (n *schemaNode) index(into map[string][]*schemaNode) {
	for k, ch := range n.children {
		if len(ch.children) > 0 || ch.open {
			into[k] = append(into[k], ch)
		}
		ch.index(into)
	}
}

// has reports whether the path continues from n.
func (n *schemaNode) has(path []string) bool {
	if len(path) == 0 || n.open {
		return true
	}
	ch := n.children[path[0]]
	return ch != nil && ch.has(path[1:])
}

var (
	spanRe      = regexp.MustCompile("`([^`]+)`")
	linkRe      = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	fenceRe     = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_-]*)")
	loneFlagRe  = regexp.MustCompile(`^--([A-Za-z0-9][A-Za-z0-9_.-]*)(=\S*)?$`)
	flagRe      = regexp.MustCompile(`(?:^|\s)--([A-Za-z0-9][A-Za-z0-9_.-]*)`)
	fieldPathRe = regexp.MustCompile(`^[a-z][A-Za-z0-9]*(\[\d*\])?(\.[a-z][A-Za-z0-9]*(\[\d*\])?)+$`)
	// A command that runs heatsink: at the start, or after a separator.
	commandRe   = regexp.MustCompile(`(?:^|[|;&(]\s*|\bsudo\s+|\bexec\s+)(?:\$ )?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:[\w./-]*/)?heatsink\s+([a-z][a-z0-9-]*)([^|;&)#]*)`)
	wordSplitRe = regexp.MustCompile(`[\s"'(),;|=\[\]]+`)
	goIdentRe   = regexp.MustCompile(`\.[A-Z][A-Za-z0-9_.]*$`)
	headingRe   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

const modulePrefix = "github.com/heatsink-dev/heatsink/"

// shellLangs are the fences whose lines are commands (rule 1); other blocks
// are programs, manifests, diagrams or output.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// check returns the references of the page at rel (relative to the
// repository root) that do not resolve.
func (c *refChecker) check(rel string, text []byte) []docFinding {
	var out []docFinding
	add := func(line int, ref, why string) { out = append(out, docFinding{line, ref, why}) }

	// Split the page into prose (fenced blocks blanked, so offsets keep
	// their lines) and fenced blocks.
	lines := strings.Split(string(text), "\n")
	prose := make([]string, len(lines))
	type fenced struct {
		lang  string
		start int // 1-based line of the first content line
		lines []string
	}
	var blocks []fenced
	var cur *fenced
	var fence string
	for i, l := range lines {
		if cur != nil {
			if t := strings.TrimSpace(l); len(t) >= len(fence) && strings.Trim(t, fence[:1]) == "" {
				blocks = append(blocks, *cur)
				cur = nil
			} else {
				cur.lines = append(cur.lines, l)
			}
			continue
		}
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			cur = &fenced{lang: m[2], start: i + 2}
			fence = m[1]
			continue
		}
		prose[i] = l
	}
	if cur != nil {
		add(cur.start-1, "```", "a fenced block without its closing fence")
	}
	body := strings.Join(prose, "\n")
	lineAt := func(off int) int { return strings.Count(body[:off], "\n") + 1 }

	for _, m := range spanRe.FindAllStringSubmatchIndex(body, -1) {
		span := strings.Join(strings.Fields(body[m[2]:m[3]]), " ")
		if strings.Contains(body[m[2]:m[3]], "\n\n") {
			continue
		}
		line := lineAt(m[0])
		c.checkCommands(span, line, add)
		if f := loneFlagRe.FindStringSubmatch(span); f != nil && !c.allFlag[f[1]] {
			add(line, span, "no heatsink subcommand has this flag")
		}
		if fieldPathRe.MatchString(span) {
			if why := c.fieldPath(span); why != "" {
				add(line, span, why)
			}
		}
		c.checkWords(span, line, add)
	}
	// Links outside code spans.
	unspanned := spanRe.ReplaceAllStringFunc(body, func(s string) string { return strings.Repeat(" ", len(s)) })
	for _, m := range linkRe.FindAllStringSubmatchIndex(unspanned, -1) {
		if why := c.link(rel, text, unspanned[m[2]:m[3]]); why != "" {
			add(lineAt(m[0]), unspanned[m[2]:m[3]], why)
		}
	}
	for _, b := range blocks {
		joined, at := "", 0
		for i, l := range b.lines {
			if joined == "" {
				at = b.start + i
			}
			if strings.HasSuffix(l, `\`) {
				joined += strings.TrimSuffix(l, `\`) + " "
				continue
			}
			joined += l
			if shellLangs[b.lang] {
				c.checkCommands(strings.TrimSpace(joined), at, add)
			}
			c.checkWords(joined, at, add)
			joined = ""
		}
		if b.lang == "yaml" || b.lang == "yml" {
			c.checkYAML(strings.Join(b.lines, "\n"), b.start, add)
		}
	}
	slices.SortStableFunc(out, func(a, b docFinding) int { return a.Line - b.Line })
	return out
}

// checkCommands applies rule 1 to one span or logical line.
func (c *refChecker) checkCommands(s string, line int, add func(int, string, string)) {
	for _, m := range commandRe.FindAllStringSubmatch(s, -1) {
		sub, rest := m[1], m[2]
		flags, ok := c.flags[sub]
		if !ok {
			add(line, "heatsink "+sub, "heatsink has no such subcommand")
			continue
		}
		for _, f := range flagRe.FindAllStringSubmatch(rest, -1) {
			if !flags[f[1]] {
				add(line, "heatsink "+sub+" --"+f[1], "no such flag of heatsink "+sub)
			}
		}
	}
}

// fieldPath applies rule 3; it returns why the path does not resolve, or "".
func (c *refChecker) fieldPath(p string) string {
	segs := strings.Split(regexp.MustCompile(`\[\d*\]`).ReplaceAllString(p, ""), ".")
	if segs[0] == "spec" || segs[0] == "status" {
		for _, s := range c.schemas {
			if s.has(segs) {
				return ""
			}
		}
		return "not a field of the HotKeyPolicy or HotKeyReport schema"
	}
	anchors := c.anchors[segs[0]]
	if len(anchors) == 0 {
		return "" // not a field path
	}
	for _, a := range anchors {
		if a.has(segs[1:]) {
			return ""
		}
	}
	return "no field " + segs[0] + " of the HotKeyPolicy or HotKeyReport schema has " + strings.Join(segs[1:], ".")
}

// checkYAML applies rule 3 to every key of the YAML documents of a fenced
// block that are a HotKeyPolicy or HotKeyReport.
func (c *refChecker) checkYAML(text string, line int, add func(int, string, string)) {
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		var obj map[string]any
		if yaml.Unmarshal([]byte(doc), &obj) != nil {
			continue
		}
		kind, _ := obj["kind"].(string)
		if kind != "HotKeyPolicy" && kind != "HotKeyReport" {
			continue
		}
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, ch := range v {
					p := prefix + "." + k
					if why := c.fieldPath(p); why != "" {
						add(line, kind+" "+p, why)
						continue
					}
					walk(p, ch)
				}
			case []any:
				for _, ch := range v {
					walk(prefix, ch)
				}
			}
		}
		for _, top := range []string{"spec", "status"} {
			if v, ok := obj[top]; ok {
				walk(top, v)
			}
		}
	}
}

// checkWords applies rule 4 to the words of one span or logical line.
func (c *refChecker) checkWords(s string, line int, add func(int, string, string)) {
	for _, w := range wordSplitRe.Split(s, -1) {
		w = strings.TrimRight(w, ".:,;`*")
		w = strings.TrimPrefix(w, "./")
		w = strings.TrimPrefix(w, modulePrefix)
		if !strings.Contains(w, "/") || strings.ContainsAny(w, "<>{}$") || !c.topHalf[strings.Split(w, "/")[0]] {
			continue
		}
		if !c.exists(w) {
			add(line, w, "no such file or directory in the repository")
		}
	}
}

// exists reports whether a repository path names something in the tree: a
// file, a directory, a glob's match, or a Go identifier of a package.
func (c *refChecker) exists(p string) bool {
	p = strings.TrimSuffix(p, "/...")
	for {
		if strings.ContainsAny(p, "*?") {
			if m, _ := filepath.Glob(filepath.Join(c.root, p)); len(m) > 0 {
				return true
			}
		} else if _, err := os.Stat(filepath.Join(c.root, p)); err == nil {
			return true
		}
		q := goIdentRe.ReplaceAllString(p, "")
		if q == p {
			return false
		}
		p = q
	}
}

// link applies rule 4 to a Markdown link's target on the page rel, whose
// text is page.
func (c *refChecker) link(rel string, page []byte, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, frag, _ := strings.Cut(target, "#")
	dest, b := rel, page
	if file != "" {
		dest = filepath.ToSlash(filepath.Join(filepath.Dir(rel), file))
		if dest == ".." || strings.HasPrefix(dest, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(c.root, dest)); err != nil {
			return "no such file or directory in the repository"
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if file != "" {
		var err error
		if b, err = os.ReadFile(filepath.Join(c.root, dest)); err != nil {
			return err.Error()
		}
	}
	if !slices.Contains(headingAnchors(b), frag) {
		return fmt.Sprintf("%s has no heading #%s", dest, frag)
	}
	return ""
}

// headingAnchors are the anchors GitHub gives a page's headings: lower
// case, punctuation dropped, spaces as hyphens, repeats numbered.
func headingAnchors(doc []byte) []string {
	var out []string
	seen := map[string]int{}
	inFence := ""
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case strings.HasPrefix(m[1], inFence):
				inFence = ""
			}
			continue
		}
		if inFence != "" {
			continue
		}
		m := headingRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// TestDocsNameOnlyWhatExists checks every page of the documentation by the
// rules at the top of this file.
func TestDocsNameOnlyWhatExists(t *testing.T) {
	c := docChecker(t)
	pages, err := filepath.Glob(filepath.Join(c.root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(c.root, "README.md"))
	for _, p := range pages {
		rel, _ := filepath.Rel(c.root, p)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range c.check(filepath.ToSlash(rel), b) {
			t.Errorf("%s %v", rel, f)
		}
	}
}

// TestDocReferenceRules plants bad references in small pages and checks
// that each is found, and that what the rules leave alone is left alone.
func TestDocReferenceRules(t *testing.T) {
	c := docChecker(t)
	tests := map[string]struct {
		doc  string
		want []string // "line: ref"
	}{
		"a flag the proxy has": {
			doc: "Run `heatsink sidecar --listen 127.0.0.1:6380 --event-loop=false`.\n",
		},
		"a flag the proxy lacks": {
			doc:  "Run `heatsink sidecar --listen :6380 --no-such-flag`.\n",
			want: []string{"1: heatsink sidecar --no-such-flag"},
		},
		"another subcommand's flag": {
			doc:  "```sh\nbin/heatsink node-agent --node-name n1 \\\n  --upstream redis:6379\n```\n",
			want: []string{"2: heatsink node-agent --upstream"},
		},
		"a subcommand that does not exist": {
			doc:  "Start it with `heatsink agent --listen :7946`.\n",
			want: []string{"1: heatsink agent"},
		},
		"library flags count": {
			doc: "`heatsink manager --kubeconfig ~/.kube/config --leader-elect=false`\n",
		},
		"other tools' flags are left alone": {
			doc: "```sh\nhelm install heatsink ./charts/heatsink --namespace heatsink-system --set a.b=c\n" +
				"kubectl apply --server-side -k config/default\nmake bench | tee out --whatever\n```\n" +
				"and `redis-benchmark --cluster -P 16`.\n",
		},
		"output and manifests are not command lines": {
			doc: "```\nheatsink demo: summary\n```\n```yaml\nresources:\n- ../../config/default\n```\n",
		},
		"a lone flag no subcommand has": {
			doc:  "Raise `--memory-per-policy`, or set `--insecure-skip-verify=true`.\n",
			want: []string{"1: --insecure-skip-verify=true"},
		},
		"spec paths": {
			doc:  "`spec.thresholds.readsPerSecond` and `spec.target.tls.insecureSkipVerify` and `status.hotKeys[].key`.\n",
			want: []string{"1: spec.target.tls.insecureSkipVerify"},
		},
		"paths from an object field": {
			doc:  "`mitigations.split.maxShards`, `split.maxShard`, `localCache.tracking`.\n",
			want: []string{"1: split.maxShard"},
		},
		"dotted names that are not fields": {
			doc: "`routing.Table`, `watch.Accept`, `routing.json`, `manager.extraArgs`, `view.snapshot`.\n",
		},
		"a policy in YAML": {
			doc: "```yaml\napiVersion: heatsink.dev/v1alpha1\nkind: HotKeyPolicy\nspec:\n" +
				"  thresholds: {readsPerSecond: 5000, sustainsFor: 2s}\n  mitigations:\n    split: {enabled: true}\n```\n",
			want: []string{"2: HotKeyPolicy spec.thresholds.sustainsFor"},
		},
		"repository paths": {
			doc: "See `hack/bench.sh`, `hack/bench.d/*.sh`, `dataplane/watch.Watcher`, `./dataplane/...`, " +
				"`go test ./dataplane/proxy -bench Forward`, `bin/heatsink`, `/etc/heatsink/tls/ca.crt`,\n" +
				"`dataplane/proxy/tsl.go` and `go test ./proxy`.\n" +
				"```go\nimport \"github.com/heatsink-dev/heatsink/nodeagent/wires\"\n```\n",
			want: []string{"2: dataplane/proxy/tsl.go", "4: nodeagent/wires"},
		},
		"links": {
			doc: "[design](design.md), [the guarantee](node-agent.md#the-guarantee), [x](nothing.md), " +
				"[y](node-agent.md#no-such-heading), [z](../../outside), [web](https://example.com/a/b), [top](#links)\n\n## Links\n",
			want: []string{"1: nothing.md", "1: node-agent.md#no-such-heading", "1: ../../outside"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, f := range c.check("docs/page.md", []byte(tc.doc)) {
				got = append(got, fmt.Sprintf("%d: %s", f.Line, f.Ref))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}
