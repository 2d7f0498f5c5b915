package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/term"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/internal/scheme"
	"github.com/heatsink-dev/heatsink/internal/top"
	"github.com/heatsink-dev/heatsink/internal/version"
)

const topSummary = `Shows the hottest keys of a HotKeyPolicy (or of every policy in the namespace)
and what heatsink does about each, refreshed every second: reads/s, writes/s,
value bytes/s, the move applied and since when. It reads the policies and their
HotKeyReports from the API with your kubeconfig, as kubectl does (--kubeconfig,
$KUBECONFIG, ~/.kube/config), and needs only get, list and watch on them: the
ClusterRole heatsink-view, which the built-in view role includes. Also a kubectl
plugin: link this binary as kubectl-heatsink on your PATH, then run
'kubectl heatsink top'.`

// topFlags are top's flags; the kubeconfig ones are kubectl's.
type topFlags struct {
	kubeconfig, context, namespace string
	allNamespaces                  bool
	output, sort                   string
	limit, width                   int
	once                           bool
	interval                       time.Duration
}

func bindTopFlags(fs *flag.FlagSet) *topFlags {
	f := &topFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to the kubeconfig file; empty: $KUBECONFIG, then ~/.kube/config, then in-cluster")
	fs.StringVar(&f.context, "context", "", "the kubeconfig context to use; empty: its current context")
	fs.StringVar(&f.namespace, "namespace", "", "the policies' namespace; empty: the context's namespace, else default")
	fs.StringVar(&f.namespace, "n", "", "short for --namespace")
	fs.BoolVar(&f.allNamespaces, "all-namespaces", false, "show the policies of every namespace")
	fs.BoolVar(&f.allNamespaces, "A", false, "short for --all-namespaces")
	fs.StringVar(&f.output, "output", "table", "table, or json: one JSON document (one line) per refresh")
	fs.StringVar(&f.output, "o", "table", "short for --output")
	fs.StringVar(&f.sort, "sort", top.SortHeat, "order of the keys: heat (the report's: closest to or furthest over a threshold first), reads, writes or bytes (per second, largest first), size (largest first)")
	fs.IntVar(&f.limit, "limit", 20, "keys shown per policy, at most; 0: all the report lists")
	fs.IntVar(&f.width, "width", 0, "the table's width in columns; 0: the terminal's, else 80")
	fs.BoolVar(&f.once, "once", false, "print once and exit (for scripts and tests)")
	fs.DurationVar(&f.interval, "interval", time.Second, "time between refreshes")
	return f
}

func runTop(args []string) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	f := bindTopFlags(fs)
	pos, err := parseFlagsArgs(fs, args, topSummary, "[policy]", 1)
	if err != nil {
		return err
	}
	src := top.Source{}
	if len(pos) == 1 {
		src.Policy = pos[0]
	}
	switch {
	case f.output != "table" && f.output != "json":
		return usageError{fmt.Errorf("--output=%q: want table or json", f.output)}
	case top.ValidSort(f.sort) != nil:
		return usageError{top.ValidSort(f.sort)}
	case f.limit < 0:
		return usageError{fmt.Errorf("--limit=%d: want 0 (all) or more", f.limit)}
	case f.interval <= 0:
		return usageError{fmt.Errorf("--interval=%s: want a positive duration", f.interval)}
	case f.allNamespaces && src.Policy != "":
		return usageError{fmt.Errorf("a policy is named in one namespace: drop --all-namespaces, or the policy's name")}
	}
	// controller-runtime's client logs nothing top needs; without a logger
	// it would warn on stderr that none is set.
	ctrllog.SetLogger(logr.Discard())

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "heatsink-top/" + version.Version
	if !f.allNamespaces {
		if src.Namespace, _, err = cc.Namespace(); err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
	}
	if src.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()}); err != nil {
		return err
	}

	o := top.Options{JSON: f.output == "json", Sort: f.sort, Limit: f.limit, Width: f.width, Once: f.once, Interval: f.interval}
	if fd := int(os.Stdout.Fd()); term.IsTerminal(fd) && !o.JSON {
		o.Clear = !o.Once
		if w, _, err := term.GetSize(fd); err == nil && o.Width == 0 {
			o.Width = w
		}
	}
	if o.Width == 0 {
		o.Width = 80
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return top.Run(ctx, src, os.Stdout, o)
}
