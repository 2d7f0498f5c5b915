package release

import (
	"strings"
	"testing"
)

func TestParseRejectsWhatIsNotARelease(t *testing.T) {
	const commit = "49054779dd259f10c160b64fd2fd3ecf54349eb8"
	for name, tc := range map[string]struct{ in, err string }{
		"valid":           {"version: v0.1.0\nprevious: {version: v0.0.9, commit: " + commit + "}\n", ""},
		"prerelease":      {"version: v1.2.3-rc.1\nprevious: {version: v1.2.2, commit: " + commit + "}\n", ""},
		"no v":            {"version: 0.1.0\nprevious: {version: v0.0.9, commit: " + commit + "}\n", "version:"},
		"short commit":    {"version: v0.1.0\nprevious: {version: v0.0.9, commit: 4905477}\n", "previous.commit"},
		"unknown field":   {"version: v0.1.0\nimage: x\nprevious: {version: v0.0.9, commit: " + commit + "}\n", "unknown field"},
		"same as release": {"version: v0.1.0\nprevious: {version: v0.1.0, commit: " + commit + "}\n", "is the version being released"},
		"build metadata":  {"version: v0.1.0+x\nprevious: {version: v0.0.9, commit: " + commit + "}\n", "version:"},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Parse = %v, want an error with %q", err, tc.err)
			case tc.err == "" && f.ImageTag() != strings.TrimPrefix(f.Version, "v"):
				t.Fatalf("ImageTag %q for %q", f.ImageTag(), f.Version)
			}
		})
	}
}
