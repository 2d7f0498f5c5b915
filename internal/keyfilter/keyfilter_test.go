package keyfilter

import (
	"testing"
)

func TestMatch(t *testing.T) {
	tests := map[string]struct {
		pattern, key string
		want         bool
	}{
		"star matches all":          {"*", "anything", true},
		"star matches empty":        {"*", "", true},
		"prefix":                    {"product:*", "product:iphone", true},
		"prefix miss":               {"product:*", "prod", false},
		"question":                  {"a?c", "abc", true},
		"question needs a byte":     {"a?c", "ac", false},
		"class":                     {"h[ae]llo", "hallo", true},
		"class miss":                {"h[ae]llo", "hillo", false},
		"negated class":             {"h[^e]llo", "hallo", true},
		"negated class miss":        {"h[^e]llo", "hello", false},
		"range":                     {"k[0-9]", "k7", true},
		"range miss":                {"k[0-9]", "kx", false},
		"escape":                    {`a\*b`, "a*b", true},
		"escape is literal":         {`a\*b`, "axb", false},
		"two stars":                 {"*:likes:*", "post:likes:42", true},
		"two stars miss":            {"*:likes:*", "post:views:42", false},
		"hash tag literal brace":    {"{user:1}:*", "{user:1}:likes", true},
		"suffix":                    {"*:counter", "a:b:counter", true},
		"suffix miss":               {"*:counter", "a:b:counters", false},
		"backtracking":              {"*a*b", "xaxxab", true},
		"pattern longer than key":   {"abcd", "abc", false},
		"trailing stars match none": {"abc**", "abc", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Match(tc.pattern, tc.key); got != tc.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.key, got, tc.want)
			}
		})
	}
}

func TestFilterIncludeExclude(t *testing.T) {
	f, err := Compile([]string{"product:*", "likes:*"}, []string{"likes:internal:*"})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{
		"product:1":        true,
		"likes:post:42":    true,
		"likes:internal:x": false,
		"session:abc":      false,
	} {
		if got := f.Match(key); got != want {
			t.Errorf("Match(%q) = %v, want %v", key, got, want)
		}
	}
	all, err := Compile(nil, []string{"session:*"})
	if err != nil {
		t.Fatal(err)
	}
	if !all.Match("x") || all.Match("session:1") {
		t.Error("empty include must mean every key, minus excludes")
	}
}

func TestValidate(t *testing.T) {
	for p, ok := range map[string]bool{
		"product:*": true,
		"a[bc]d":    true,
		`a\[`:       true,
		"a[bc":      false,
		`abc\`:      false,
		"":          false,
	} {
		if err := Validate(p); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", p, err, ok)
		}
	}
}

func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"*", "a"}, {"a[b-d]*", "acx"}, {`\*?[^x]`, "*yz"}, {"[", "["}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, key string) {
		_ = Validate(p)
		_ = Match(p, key) // must not panic or hang
		if Validate(p) == nil && !hasMeta(p) && Match(p, key) != (p == key) {
			t.Fatalf("literal pattern %q vs %q", p, key)
		}
	})
}
