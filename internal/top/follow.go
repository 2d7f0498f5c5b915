package top

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// Source is where the objects are read: Namespace ("" for every namespace)
// and Policy ("" for every policy there). It needs get, list and watch on
// hotkeypolicies and hotkeyreports, nothing else.
type Source struct {
	Client    client.WithWatch
	Namespace string
	Policy    string
}

func (s Source) opts(rv string) []client.ListOption {
	o := &client.ListOptions{Namespace: s.Namespace, Raw: &v1.ListOptions{ResourceVersion: rv}}
	opts := []client.ListOption{o}
	if s.Policy != "" {
		// The report is named like its policy.
		opts = append(opts, client.MatchingFields{"metadata.name": s.Policy})
	}
	return opts
}

// List reads the policies and reports once.
func (s Source) List(ctx context.Context) ([]v1alpha1.HotKeyPolicy, []v1alpha1.HotKeyReport, error) {
	var pl v1alpha1.HotKeyPolicyList
	if err := s.Client.List(ctx, &pl, s.opts("")...); err != nil {
		return nil, nil, s.explain(err)
	}
	var rl v1alpha1.HotKeyReportList
	if err := s.Client.List(ctx, &rl, s.opts("")...); err != nil {
		return nil, nil, s.explain(err)
	}
	if err := s.found(len(pl.Items), len(rl.Items)); err != nil {
		return nil, nil, err
	}
	return pl.Items, rl.Items, nil
}

// found says that a named policy does not exist when neither it nor its
// report does (a report may outlive its policy for a moment).
func (s Source) found(policies, reports int) error {
	if s.Policy != "" && policies == 0 && reports == 0 {
		return fmt.Errorf("no HotKeyPolicy %q in namespace %q", s.Policy, s.Namespace)
	}
	return nil
}

// explain adds to an API error what a person needs to act on it.
func (s Source) explain(err error) error {
	where := fmt.Sprintf("namespace %q", s.Namespace)
	if s.Namespace == "" {
		where = "every namespace (--all-namespaces)"
	}
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w\nheatsink top needs get, list and watch on hotkeypolicies and hotkeyreports (group heatsink.dev) in %s: "+
			"the ClusterRole heatsink-view grants them, and the built-in view role includes it (docs/top.md)", err, where)
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return fmt.Errorf("%w (are heatsink's CRDs installed in this cluster?)", err)
	}
	return err
}

// State is the objects as last seen, safe for concurrent use: Follow writes
// it, the refresh loop reads it.
type State struct {
	mu       sync.Mutex
	policies map[string]v1alpha1.HotKeyPolicy
	reports  map[string]v1alpha1.HotKeyReport
}

// Snapshot returns copies of the objects.
func (st *State) Snapshot() ([]v1alpha1.HotKeyPolicy, []v1alpha1.HotKeyReport) {
	st.mu.Lock()
	defer st.mu.Unlock()
	ps := make([]v1alpha1.HotKeyPolicy, 0, len(st.policies))
	for _, p := range st.policies {
		ps = append(ps, p)
	}
	rs := make([]v1alpha1.HotKeyReport, 0, len(st.reports))
	for _, r := range st.reports {
		rs = append(rs, r)
	}
	return ps, rs
}

// Follow lists the objects into a new State, then keeps it up to date with
// one watch per kind until ctx ends; a watch that ends or fails (the API
// server closes watches every few minutes; a resourceVersion expires) is
// replaced by a new list and watch. It returns once the first lists are in,
// with their error, if any; later errors go to errs (a list that fails ends
// that kind's following).
func (s Source) Follow(ctx context.Context, errs chan<- error) (*State, error) {
	st := &State{}
	pl := &v1alpha1.HotKeyPolicyList{}
	rl := &v1alpha1.HotKeyReportList{}
	setP := func() {
		st.policies = byKey(pl.Items, func(p v1alpha1.HotKeyPolicy) string { return p.Namespace + "/" + p.Name })
	}
	setR := func() {
		st.reports = byKey(rl.Items, func(r v1alpha1.HotKeyReport) string { return r.Namespace + "/" + r.Name })
	}
	pRV, err := s.relist(ctx, st, pl, setP)
	if err != nil {
		return nil, err
	}
	rRV, err := s.relist(ctx, st, rl, setR)
	if err != nil {
		return nil, err
	}
	if err := s.found(len(st.policies), len(st.reports)); err != nil {
		return nil, err
	}
	go s.follow(ctx, st, pl, pRV, func(obj any, del bool) {
		if p, ok := obj.(*v1alpha1.HotKeyPolicy); ok {
			setOrDelete(st.policies, p.Namespace+"/"+p.Name, *p, del)
		}
	}, setP, errs)
	go s.follow(ctx, st, rl, rRV, func(obj any, del bool) {
		if r, ok := obj.(*v1alpha1.HotKeyReport); ok {
			setOrDelete(st.reports, r.Namespace+"/"+r.Name, *r, del)
		}
	}, setR, errs)
	return st, nil
}

// relist lists into list and, under st's lock, lets set take it; it returns
// the list's resourceVersion to watch from.
func (s Source) relist(ctx context.Context, st *State, list client.ObjectList, set func()) (string, error) {
	if err := s.Client.List(ctx, list, s.opts("")...); err != nil {
		return "", s.explain(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	set()
	return list.GetResourceVersion(), nil
}

func (s Source) follow(ctx context.Context, st *State, list client.ObjectList, rv string, apply func(obj any, del bool), set func(), errs chan<- error) {
	for ctx.Err() == nil {
		w, err := s.Client.Watch(ctx, list, s.opts(rv)...)
		if err == nil {
			rv = s.drain(ctx, st, w, rv, apply)
			w.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		// Not a hot loop: a failed watch waits a second before the new list.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		rv, err = s.relist(ctx, st, list, set)
		if err != nil {
			if ctx.Err() == nil {
				errs <- err
			}
			return
		}
	}
}

// drain applies w's events to st until w ends or fails; it returns the last
// resourceVersion seen.
func (s Source) drain(ctx context.Context, st *State, w watch.Interface, rv string, apply func(obj any, del bool)) string {
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				o, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				st.mu.Lock()
				apply(o, ev.Type == watch.Deleted)
				st.mu.Unlock()
				rv = o.GetResourceVersion()
			case watch.Bookmark:
				if o, ok := ev.Object.(client.Object); ok {
					rv = o.GetResourceVersion()
				}
			case watch.Error:
				return rv
			}
		}
	}
}

func byKey[T any](items []T, key func(T) string) map[string]T {
	m := make(map[string]T, len(items))
	for _, it := range items {
		m[key(it)] = it
	}
	return m
}

func setOrDelete[T any](m map[string]T, k string, v T, del bool) {
	if del {
		delete(m, k)
	} else {
		m[k] = v
	}
}
