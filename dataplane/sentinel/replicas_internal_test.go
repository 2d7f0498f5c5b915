package sentinel

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUsableReplicas(t *testing.T) {
	r := func(port, flags, link string) map[string]string {
		return map[string]string{"ip": "127.0.0.1", "port": port, "flags": flags, "master-link-status": link}
	}
	for name, tc := range map[string]struct {
		list []map[string]string
		want []string
	}{
		"none":              {},
		"up and linked":     {list: []map[string]string{r("7001", "slave", "ok"), r("7002", "slave", "ok")}, want: []string{"127.0.0.1:7001", "127.0.0.1:7002"}},
		"subjectively down": {list: []map[string]string{r("7001", "s_down,slave", "ok"), r("7002", "slave", "ok")}, want: []string{"127.0.0.1:7002"}},
		"disconnected":      {list: []map[string]string{r("7001", "slave,disconnected", "ok")}},
		"link down":         {list: []map[string]string{r("7001", "slave", "err")}},
		"no address":        {list: []map[string]string{{"flags": "slave", "master-link-status": "ok"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, usableReplicas(tc.list)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
