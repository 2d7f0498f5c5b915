package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeReviewer knows tokens and which users may get which paths, and counts
// the reviews it answers.
type fakeReviewer struct {
	users        map[string]string // token -> user
	allowed      map[string]bool   // user verb path -> allowed
	fail         bool
	authn, authz int
}

func (f *fakeReviewer) Authenticate(_ context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	f.authn++
	if f.fail {
		return authenticationv1.UserInfo{}, false, errors.New("API server unreachable")
	}
	u, ok := f.users[token]
	return authenticationv1.UserInfo{Username: u}, ok, nil
}

func (f *fakeReviewer) Authorize(_ context.Context, u authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	f.authz++
	return f.allowed[u.Username+" "+verb+" "+path], "", nil
}

func TestFilter(t *testing.T) {
	tests := map[string]struct {
		header string
		fail   bool
		want   int
	}{
		"no header":              {want: http.StatusUnauthorized},
		"basic auth":             {header: "Basic dXNlcjpwYXNz", want: http.StatusUnauthorized},
		"empty bearer":           {header: "Bearer ", want: http.StatusUnauthorized},
		"unknown token":          {header: "Bearer forged", want: http.StatusUnauthorized},
		"known, not allowed":     {header: "Bearer nosy-token", want: http.StatusForbidden},
		"known and allowed":      {header: "Bearer prom-token", want: http.StatusOK},
		"API server unreachable": {header: "Bearer prom-token", fail: true, want: http.StatusInternalServerError},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &fakeReviewer{
				users:   map[string]string{"prom-token": "system:serviceaccount:monitoring:prometheus", "nosy-token": "system:serviceaccount:x:nosy"},
				allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus get /metrics": true},
				fail:    tc.fail,
			}
			h, err := New(r, clocktesting.NewFakePassiveClock(time.Unix(0, 0)))(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprint(w, "metrics")
			}))
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("status %d (%s), want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
}

// TestFilterCaches checks that a scraper costs one review pair per cache
// lifetime, that a denial is remembered for less time than an allowance,
// and that the caches stay bounded.
func TestFilterCaches(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	r := &fakeReviewer{
		users:   map[string]string{"prom": "prometheus", "nosy": "nosy"},
		allowed: map[string]bool{"prometheus get /metrics": true},
	}
	h, _ := New(r, clk)(logr.Discard(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	scrape := func(token string) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for range 10 {
		if scrape("prom") != http.StatusOK {
			t.Fatal("prometheus refused")
		}
		clk.SetTime(clk.Now().Add(5 * time.Second))
	}
	if r.authn != 1 || r.authz != 1 {
		t.Errorf("10 scrapes within a minute made %d token and %d access reviews, want 1 and 1", r.authn, r.authz)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	scrape("prom")
	if r.authn != 2 || r.authz != 1 {
		t.Errorf("after the token lifetime: %d token and %d access reviews, want 2 and 1 (allowance kept 5m)", r.authn, r.authz)
	}
	scrape("nosy")
	clk.SetTime(clk.Now().Add(31 * time.Second))
	r.allowed["nosy get /metrics"] = true // granted meanwhile
	if got := scrape("nosy"); got != http.StatusOK {
		t.Errorf("a denial is remembered past 30s: status %d", got)
	}

	f := &filter{r: r, clk: clk, tokens: newCache[tokenResult](clk), decisions: newCache[bool](clk)}
	for i := range 3 * maxEntries {
		f.tokens.put(fmt.Sprint(i), tokenResult{}, time.Hour)
	}
	if n := len(f.tokens.m); n > maxEntries {
		t.Errorf("token cache holds %d entries, bound is %d", n, maxEntries)
	}
}
