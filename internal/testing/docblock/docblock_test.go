package docblock

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	doc := "# Title\n\n<!-- test: install -->\n```sh\nhelm install x\nkubectl get pods\n```\n\n```sh\nnot tagged\n```\n\n<!-- test: health -->\n\n````lua\nreturn hs\n````\n"
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Block{
		"install": {Name: "install", Lang: "sh", Text: "helm install x\nkubectl get pods\n", Line: 4},
		"health":  {Name: "health", Lang: "lua", Text: "return hs\n", Line: 15},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for name, bad := range map[string]string{
		"tag without block": "<!-- test: x -->\ntext\n",
		"unclosed block":    "<!-- test: x -->\n```sh\nls\n",
		"tagged twice":      "<!-- test: x -->\n```sh\nls\n```\n<!-- test: x -->\n```sh\nls\n```\n",
		"tag at the end":    "<!-- test: x -->\n",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}
