package routing

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReplicaReadsRoundTrip: replica reads travel in the published JSON
// (the table-wide settings and each entry's bound), bad values are refused,
// and a table without them parses as before at schemaVersion 1.
func TestReplicaReadsRoundTrip(t *testing.T) {
	const head = `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,`
	for name, tc := range map[string]struct {
		json         string
		wantSettings *ReplicaSettings
		wantEntry    *ReplicaReads
		wantErr      string
	}{
		"absent":     {json: head + `"entries":[{"key":"k","source":"detected","coalesce":true}]}`},
		"standalone": {json: head + `"entries":[{"key":"k","source":"detected","replicaReads":{"maxLagMillis":500}}],"replicas":{"addresses":["127.0.0.1:7001","127.0.0.1:7002"],"checkMillis":1000}}`, wantSettings: &ReplicaSettings{Addresses: []string{"127.0.0.1:7001", "127.0.0.1:7002"}, CheckMillis: 1000}, wantEntry: &ReplicaReads{MaxLagMillis: 500}},
		"discovered": {json: head + `"entries":[{"key":"k","source":"detected","replicaReads":{"maxLagMillis":1000}}],"replicas":{"checkMillis":250}}`, wantSettings: &ReplicaSettings{CheckMillis: 250}, wantEntry: &ReplicaReads{MaxLagMillis: 1000}},
		"zero lag":   {json: head + `"entries":[{"key":"k","source":"detected","replicaReads":{"maxLagMillis":0}}],"replicas":{"checkMillis":250}}`, wantErr: "maxLagMillis must be positive"},
		"zero check": {json: head + `"entries":[],"replicas":{"checkMillis":0}}`, wantErr: "checkMillis must be positive"},
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
			if diff := cmp.Diff(tc.wantSettings, tbl.Replicas); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEntry, tbl.Lookup("k").ReplicaReads); diff != "" {
				t.Errorf("entry (-want +got):\n%s", diff)
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
