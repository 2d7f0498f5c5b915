package proxy

import "testing"

// TestKillMatches: which connections a CLIENT KILL's filters match in a
// CLIENT LIST, as Redis matches them.
func TestKillMatches(t *testing.T) {
	list := []byte("id=7 addr=10.0.0.1:1000 laddr=10.0.0.9:6379 flags=N user=default age=5\n" +
		"id=8 addr=10.0.0.2:1000 laddr=10.0.0.9:6379 flags=P user=alice age=50\n" +
		"id=9 addr=10.0.0.3:1000 laddr=10.0.0.8:6379 flags=O user=default age=500\n")
	const own = "7"
	for name, tc := range map[string]struct {
		filters []string
		want    killMatch
	}{
		"own id":                       {[]string{"ID", "7"}, killOwnOnly},
		"own id, other type":           {[]string{"ID", "7", "TYPE", "pubsub"}, killNone},
		"other id":                     {[]string{"ID", "8"}, killOthers},
		"no such id":                   {[]string{"ID", "70"}, killNone},
		"own addr":                     {[]string{"ADDR", "10.0.0.1:1000", "SKIPME", "no"}, killOwnOnly},
		"type normal: own and MONITOR": {[]string{"TYPE", "normal"}, killOthers},
		"type normal, own laddr":       {[]string{"TYPE", "normal", "LADDR", "10.0.0.9:6379"}, killOwnOnly},
		"type pubsub":                  {[]string{"TYPE", "pubsub"}, killOthers},
		"type master":                  {[]string{"TYPE", "master"}, killNone},
		"type slave is replica":        {[]string{"TYPE", "SLAVE"}, killNone},
		"user alice":                   {[]string{"USER", "alice"}, killOthers},
		"user default, laddr of own":   {[]string{"USER", "default", "LADDR", "10.0.0.9:6379"}, killOwnOnly},
		"user bob":                     {[]string{"USER", "bob"}, killNone},
		"laddr elsewhere":              {[]string{"LADDR", "1.2.3.4:5"}, killNone},
		"maxage 10: older ones":        {[]string{"MAXAGE", "10"}, killOthers},
		"maxage equal to the age":      {[]string{"MAXAGE", "5", "ID", "7"}, killOwnOnly},
		"maxage 1000: none":            {[]string{"MAXAGE", "1000"}, killNone},
		"maxage 1: every one":          {[]string{"MAXAGE", "1", "USER", "default", "LADDR", "10.0.0.9:6379"}, killOwnOnly},
		"last of a repeated filter":    {[]string{"ID", "8", "ID", "7"}, killOwnOnly},
		"an unknown filter":            {[]string{"NOSUCH", "x"}, killOthers},
	} {
		t.Run(name, func(t *testing.T) {
			args := make([][]byte, len(tc.filters))
			for i, f := range tc.filters {
				args[i] = []byte(f)
			}
			if got := killMatches(args, clientList(list), []byte(own)); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
