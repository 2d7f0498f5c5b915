// Package metricsauth protects the manager's metrics endpoint as kubebuilder
// v4 does (controller-runtime's metrics/filters): a caller must present a
// bearer token that the API server authenticates (TokenReview) and may get
// the URL path (SubjectAccessReview on a non-resource URL, e.g. the
// ClusterRole heatsink-metrics-reader). Decisions are cached briefly, so a
// Prometheus scraping every 30 s costs the API server one review pair every
// few minutes.
//
// Why not controller-runtime's filters package: it links k8s.io/apiserver,
// which doubled the one heatsink binary (55 MB to 117 MB), and that binary is
// also the sidecar pulled onto every application node. This is the same
// protocol with client-go's typed clients.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Cache lifetimes, as controller-runtime's filter: token reviews 1 minute,
// allowed 5 minutes, denied 30 seconds.
const (
	tokenTTL = time.Minute
	allowTTL = 5 * time.Minute
	denyTTL  = 30 * time.Second
	// maxEntries bounds each cache whatever callers send.
	maxEntries = 1024
	// reviewTimeout bounds one review call.
	reviewTimeout = 10 * time.Second
)

// Reviewer asks the API server who a token is and what it may do.
type Reviewer interface {
	// Authenticate returns the user of token; ok is false for a token the
	// API server does not accept.
	Authenticate(ctx context.Context, token string) (user authenticationv1.UserInfo, ok bool, err error)
	// Authorize says whether user may verb the non-resource path.
	Authorize(ctx context.Context, user authenticationv1.UserInfo, verb, path string) (allowed bool, reason string, err error)
}

// FilterProvider is a metricsserver.Options.FilterProvider.
func FilterProvider(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return New(apiReviewer{cs}, clock.RealClock{}), nil
}

// New returns a filter that lets through only requests r authenticates and
// authorizes, caching decisions on clk.
func New(r Reviewer, clk clock.PassiveClock) metricsserver.Filter {
	f := &filter{r: r, clk: clk, tokens: newCache[tokenResult](clk), decisions: newCache[bool](clk)}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			code, msg := f.check(req)
			if code != http.StatusOK {
				if code == http.StatusInternalServerError {
					log.Error(nil, "metrics request refused", "reason", msg)
				}
				http.Error(w, msg, code)
				return
			}
			next.ServeHTTP(w, req)
		}), nil
	}
}

type tokenResult struct {
	user authenticationv1.UserInfo
	ok   bool
}

type filter struct {
	r         Reviewer
	clk       clock.PassiveClock
	tokens    *cache[tokenResult]
	decisions *cache[bool]
}

// check returns the status to answer with: 200 lets the request through.
func (f *filter) check(req *http.Request) (int, string) {
	token, found := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !found || strings.TrimSpace(token) == "" {
		return http.StatusUnauthorized, "Unauthorized: a bearer token is required"
	}
	ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
	defer cancel()
	tkey := fmt.Sprintf("%x", sha256.Sum256([]byte(token)))
	tr, cached := f.tokens.get(tkey)
	if !cached {
		user, ok, err := f.r.Authenticate(ctx, token)
		if err != nil {
			return http.StatusInternalServerError, "Authentication failed"
		}
		tr = tokenResult{user, ok}
		f.tokens.put(tkey, tr, tokenTTL)
	}
	if !tr.ok {
		return http.StatusUnauthorized, "Unauthorized"
	}
	verb, path := strings.ToLower(req.Method), req.URL.Path
	dkey := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s", tr.user.Username, tr.user.UID, strings.Join(tr.user.Groups, ","), verb, path)
	allowed, cached := f.decisions.get(dkey)
	if !cached {
		ok, _, err := f.r.Authorize(ctx, tr.user, verb, path)
		if err != nil {
			return http.StatusInternalServerError, fmt.Sprintf("Authorization for user %s failed", tr.user.Username)
		}
		allowed = ok
		ttl := denyTTL
		if ok {
			ttl = allowTTL
		}
		f.decisions.put(dkey, ok, ttl)
	}
	if !allowed {
		return http.StatusForbidden, fmt.Sprintf("Authorization denied for user %s", tr.user.Username)
	}
	return http.StatusOK, ""
}

// cache is a small map with expiry and a size bound.
type cache[V any] struct {
	mu  sync.Mutex
	clk clock.PassiveClock
	m   map[string]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

func newCache[V any](clk clock.PassiveClock) *cache[V] {
	return &cache[V]{clk: clk, m: map[string]entry[V]{}}
}

func (c *cache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !c.clk.Now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *cache[V]) put(k string, v V, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	if len(c.m) >= maxEntries {
		for key, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, key)
			}
		}
		for key := range c.m {
			if len(c.m) < maxEntries {
				break
			}
			delete(c.m, key) // full of live entries: drop any
		}
	}
	c.m[k] = entry[V]{v, now.Add(ttl)}
}

// apiReviewer is Reviewer on the API server's review APIs.
type apiReviewer struct{ cs kubernetes.Interface }

func (a apiReviewer) Authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	tr, err := a.cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, false, err
	}
	return tr.Status.User, tr.Status.Authenticated, nil
}

func (a apiReviewer) Authorize(ctx context.Context, u authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	return sar.Status.Allowed, sar.Status.Reason, nil
}
