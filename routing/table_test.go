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

// TestDatabase: a table names the database it governs; 0 is the default
// and keeps schemaVersion 1 (and the bytes of a table written before the
// field existed), any other database needs schemaVersion 2, which a
// version-1 reader refuses instead of applying the table to database 0.
func TestDatabase(t *testing.T) {
	for name, tc := range map[string]struct {
		json    string
		want    int32
		wantErr string
	}{
		"absent is 0":              {json: `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[]}`},
		"2 at schema 2":            {json: `{"schemaVersion":2,"policy":"ns/p","version":1,"database":2,"epochMillis":60000,"entries":[]}`, want: 2},
		"0 at schema 2":            {json: `{"schemaVersion":2,"policy":"ns/p","version":1,"database":0,"epochMillis":60000,"entries":[]}`},
		"2 at schema 1 is refused": {json: `{"schemaVersion":1,"policy":"ns/p","version":1,"database":2,"epochMillis":60000,"entries":[]}`, wantErr: "database 2 needs schemaVersion 2"},
		"16 is out of range":       {json: `{"schemaVersion":2,"policy":"ns/p","version":1,"database":16,"epochMillis":60000,"entries":[]}`, wantErr: "database 16 out of range"},
		"negative":                 {json: `{"schemaVersion":2,"policy":"ns/p","version":1,"database":-1,"epochMillis":60000,"entries":[]}`, wantErr: "out of range"},
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
			if tbl.Database != tc.want {
				t.Errorf("database = %d, want %d", tbl.Database, tc.want)
			}
		})
	}
	// The writer's stamp: database 0 keeps the version-1 bytes.
	for db, want := range map[int32]string{
		0: `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[]}`,
		3: `{"schemaVersion":2,"policy":"ns/p","version":1,"database":3,"epochMillis":60000,"entries":[]}`,
	} {
		tbl := Table{SchemaVersion: SchemaVersionFor(db), Policy: "ns/p", Version: 1, Database: db, EpochMillis: 60000, Entries: []Entry{}}
		b, err := tbl.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("database %d marshals to %s, want %s", db, b, want)
		}
	}
}

// TestRefreshAheadPercent: an entry's localCache.refreshAheadPercent
// travels in the published JSON; absent (an older writer) is 0, off; out
// of 0..90 the table is refused.
func TestRefreshAheadPercent(t *testing.T) {
	entry := func(lc string) string {
		return `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[{"key":"k","source":"detected","localCache":` + lc + `}]}`
	}
	for name, tc := range map[string]struct {
		json    string
		want    int32
		wantErr string
	}{
		"absent":   {json: entry(`{"ttlMillis":2000}`)},
		"10":       {json: entry(`{"ttlMillis":2000,"refreshAheadPercent":10}`), want: 10},
		"negative": {json: entry(`{"ttlMillis":2000,"refreshAheadPercent":-1}`), wantErr: "refreshAheadPercent must be 0 to 90"},
		"over 90":  {json: entry(`{"ttlMillis":2000,"refreshAheadPercent":91}`), wantErr: "refreshAheadPercent must be 0 to 90"},
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
			if got := tbl.Entries[0].LocalCache.RefreshAheadPercent; got != tc.want {
				t.Fatalf("refreshAheadPercent = %d, want %d", got, tc.want)
			}
			out, err := tbl.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == 0 && strings.Contains(string(out), "refreshAheadPercent") {
				t.Errorf("0 is written out (older readers' bytes change): %s", out)
			}
		})
	}
}
