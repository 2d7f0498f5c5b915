// Command heatsink is the one binary of heatsink; its subcommands are the
// components: manager (control plane), node agent (per node) and proxy
// (sidecar), plus top (a live view of the hottest keys, for people, with
// their kubeconfig), version and help. The demo has its own binary
// (demo/heatsink-demo).
//
// Conventions: `heatsink help`, `heatsink --help` and `heatsink <command>
// --help` print usage to stdout and exit 0; a usage error (unknown command or
// flag) is printed once to stderr and exits 2; an error of a running command
// is printed once to stderr and exits 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/heatsink-dev/heatsink/internal/version"
)

// command is a subcommand; run parses its own flags with parseFlags.
type command struct {
	name, summary string
	run           func(args []string) error
}

func commands() []command {
	return []command{
		{"manager", "run the control plane: HotKeyPolicy reconciler and admission webhooks (Deployment)", runManager},
		{"node-agent", "run a node agent: counts its node's traffic, streams summaries to the manager, serves routing to its sidecars (DaemonSet)", runNodeAgent},
		{"sidecar", "run the sidecar (a RESP proxy) beside an application (injected)", runSidecar},
		{"top", "show the hottest keys of policies, refreshed every second, from the API with your kubeconfig (read-only)", runTop},
		{"version", "print the version and exit", runVersion},
		{"help", "print this help, or a command's with `heatsink help <command>`", nil},
	}
}

// progName is how the user called this binary, for messages: "heatsink",
// or "kubectl heatsink" when kubectl runs it as the plugin kubectl-heatsink
// (a link to this binary by that name on the PATH).
var progName = "heatsink"

func main() {
	progName = nameFor(os.Args[0])
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// nameFor is progName for the binary's path argv0.
func nameFor(argv0 string) string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == "kubectl-heatsink" {
		return "kubectl heatsink"
	}
	return "heatsink"
}

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return 0
		}
		name, rest = rest[0], []string{"--help"}
	case "--version", "-version":
		name = "version"
	}
	for _, c := range commands() {
		if c.name != name || c.run == nil {
			continue
		}
		err := c.run(rest)
		var ue usageError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "%s %s: %v\nRun '%s %s --help' for usage.\n", progName, name, ue.err, progName, name)
			return 2
		default:
			fmt.Fprintf(stderr, "%s %s: %v\n", progName, name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "heatsink: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "heatsink finds hot keys in Redis and spreads their load.\n\nUsage:\n  heatsink <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'heatsink <command> --help' for a command's flags.\n")
}

// usageError is a bad command line; run prints it once, with a hint.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

// parseFlags parses args into fs. The FlagSet prints nothing itself: --help
// prints the flags to stdout and returns flag.ErrHelp; a bad flag returns a
// usageError that run prints once.
func parseFlags(fs *flag.FlagSet, args []string, summary string) error {
	_, err := parseFlagsArgs(fs, args, summary, "", 0)
	return err
}

// parseFlagsArgs is parseFlags for a command that takes up to maxArgs
// arguments (named in the usage line by argsUsage, e.g. "[policy]"), before,
// between or after the flags, as kubectl takes them.
func parseFlagsArgs(fs *flag.FlagSet, args []string, summary, argsUsage string, maxArgs int) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var pos []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			if argsUsage != "" {
				argsUsage += " "
			}
			fmt.Fprintf(os.Stdout, "Usage: %s %s %s[flags]\n\n%s\n\nFlags:\n", progName, fs.Name(), argsUsage, summary)
			printFlags(os.Stdout, fs)
			return nil, flag.ErrHelp
		case err != nil:
			return nil, usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) > maxArgs {
		return nil, usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(pos[maxArgs:], " "))}
	}
	return pos, nil
}

// printFlags lists fs's flags as --name (flag accepts one or two dashes; the
// docs and manifests use two).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if len(f.Name) == 1 { // a short form (-n, -o), as kubectl writes it
			line = "  -" + f.Name
		}
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args, "Prints the version of this binary."); err != nil {
		return err
	}
	fmt.Println(version.Get())
	return nil
}
