package routing

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLocalCacheSettingsRoundTrip: the table-wide cache settings travel in
// the published JSON, and a table without them parses as before.
func TestLocalCacheSettingsRoundTrip(t *testing.T) {
	for name, tc := range map[string]struct {
		json    string
		want    *CacheSettings
		wantErr string
	}{
		"absent":   {json: `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[]}`},
		"tracking": {json: `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[],"localCache":{"tracking":true,"maxEntries":500,"maxBytes":1048576}}`, want: &CacheSettings{Tracking: true, MaxEntries: 500, MaxBytes: 1 << 20}},
		"negative": {json: `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[],"localCache":{"maxEntries":-1}}`, wantErr: "must not be negative"},
		"unknown fields of a newer writer are ignored": {json: `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[],"localCache":{"tracking":true,"someday":1}}`, want: &CacheSettings{Tracking: true}},
	} {
		t.Run(name, func(t *testing.T) {
			tbl, err := Parse([]byte(tc.json))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, tbl.LocalCache); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			out, err := tbl.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			again, err := Parse(out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tbl, again); diff != "" {
				t.Errorf("after a round trip (-first +second):\n%s", diff)
			}
		})
	}
}
