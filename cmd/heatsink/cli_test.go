package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the CLI tests run this test binary as the heatsink command:
// with HEATSINK_CLI_SELF=1 it is main, with its real exit code and streams.
func TestMain(m *testing.M) {
	if os.Getenv("HEATSINK_CLI_SELF") == "1" {
		progName = nameFor(os.Args[0])
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func heatsink(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HEATSINK_CLI_SELF=1", "KUBECONFIG=", "HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String(), errb.String()
		}
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// TestCLIConventions checks the command line as a user meets it: help exits
// 0 on stdout and lists every command, every error is printed once on
// stderr, usage errors exit 2 and runtime errors 1, there is a version and
// a --kubeconfig.
func TestCLIConventions(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	tests := map[string]struct {
		args       []string
		wantCode   int
		wantStdout []string // each must appear
		wantStderr string   // must appear exactly once
	}{
		"--help":                           {args: []string{"--help"}, wantStdout: []string{"manager", "node-agent", "sidecar", "top", "version", "help"}},
		"top --help":                       {args: []string{"top", "--help"}, wantStdout: []string{"Usage: heatsink top [policy] [flags]", "--kubeconfig", "--context", "--namespace", "  -n string", "  -A\n", "--all-namespaces", "--output", "--sort", "--once"}},
		"top, bad sort":                    {args: []string{"top", "--sort=name"}, wantCode: 2, wantStderr: `--sort="name": want one of [heat reads writes bytes size]`},
		"top, bad output":                  {args: []string{"top", "-o", "yaml"}, wantCode: 2, wantStderr: `--output="yaml": want table or json`},
		"top, two policies":                {args: []string{"top", "a", "-n", "shop", "b"}, wantCode: 2, wantStderr: "unexpected arguments: b"},
		"top, policy everywhere":           {args: []string{"top", "a", "-A"}, wantCode: 2, wantStderr: "drop --all-namespaces"},
		"top, bad kubeconfig":              {args: []string{"top", "--kubeconfig=" + missing, "--once"}, wantCode: 1, wantStderr: missing},
		"-h":                               {args: []string{"-h"}, wantStdout: []string{"manager", "node-agent", "sidecar"}},
		"help":                             {args: []string{"help"}, wantStdout: []string{"manager", "node-agent", "sidecar", "version"}},
		"help manager":                     {args: []string{"help", "manager"}, wantStdout: []string{"--kubeconfig", "--metrics-secure", "--enable-http2", "--proxy-image"}},
		"manager --help":                   {args: []string{"manager", "--help"}, wantStdout: []string{"Usage: heatsink manager", "--kubeconfig", "--leader-elect"}},
		"node-agent --help":                {args: []string{"node-agent", "--help"}, wantStdout: []string{"Usage: heatsink node-agent", "--node-name", "--manager-address"}},
		"sidecar --help":                   {args: []string{"sidecar", "--help"}, wantStdout: []string{"Usage: heatsink sidecar", "--upstream", "--sentinel", "--sentinel-master", "--sentinel-password-file", "--sentinel-username-file"}},
		"version":                          {args: []string{"version"}, wantStdout: []string{"heatsink ", "go1."}},
		"--version":                        {args: []string{"--version"}, wantStdout: []string{"heatsink "}},
		"no command":                       {wantCode: 2, wantStderr: "Usage:"},
		"unknown command":                  {args: []string{"frobnicate"}, wantCode: 2, wantStderr: `unknown command "frobnicate"`},
		"unknown flag":                     {args: []string{"manager", "--bogus"}, wantCode: 2, wantStderr: "flag provided but not defined: -bogus"},
		"stray argument":                   {args: []string{"version", "extra"}, wantCode: 2, wantStderr: "unexpected arguments: extra"},
		"bad flag value":                   {args: []string{"sidecar", "--max-bulk=0"}, wantCode: 2, wantStderr: "--max-bulk must be positive"},
		"bad startup wait":                 {args: []string{"sidecar", "--startup-wait=-1s"}, wantCode: 2, wantStderr: `--startup-wait="-1s"`},
		"sidecar, upstream and sentinel":   {args: []string{"sidecar", "--upstream=redis:6379", "--sentinel=sentinel:26379", "--sentinel-master=mymaster"}, wantCode: 2, wantStderr: "--upstream and --sentinel are exclusive"},
		"sidecar, sentinel without master": {args: []string{"sidecar", "--sentinel=sentinel:26379"}, wantCode: 2, wantStderr: "--sentinel needs --sentinel-master"},
		"sentinel file without --sentinel": {args: []string{"sidecar", "--upstream=redis:6379", "--sentinel-password-file=/etc/heatsink/sentinel-credentials/password"}, wantCode: 2, wantStderr: "--sentinel-username-file and --sentinel-password-file need --sentinel"},
		"node-agent without node":          {args: []string{"node-agent", "--node-name="}, wantCode: 2, wantStderr: "--node-name or $NODE_NAME is required"},
		"node-agent reply sampling":        {args: []string{"node-agent", "--node-name=n", "--capture", "--capture-reply-sample=65536"}, wantCode: 2, wantStderr: "--capture-reply-sample must be 0..65535"},
		"manager, bad kubeconfig":          {args: []string{"manager", "--kubeconfig=" + missing}, wantCode: 1, wantStderr: missing},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := heatsink(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			for _, w := range tc.wantStdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			if tc.wantCode == 0 && stderr != "" {
				t.Errorf("stderr is not empty on success:\n%s", stderr)
			}
			if tc.wantStderr != "" {
				if n := strings.Count(stderr, tc.wantStderr); n != 1 {
					t.Errorf("stderr holds %q %d times, want once:\n%s", tc.wantStderr, n, stderr)
				}
				if stdout != "" {
					t.Errorf("an error wrote to stdout:\n%s", stdout)
				}
			}
		})
	}
}

// TestKubectlPlugin runs the binary as kubectl runs a plugin: by the name
// kubectl-heatsink (a link), with the arguments after `kubectl heatsink`.
// It works the same and names itself as the user typed it.
func TestKubectlPlugin(t *testing.T) {
	link := filepath.Join(t.TempDir(), "kubectl-heatsink")
	if err := os.Symlink(os.Args[0], link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "top", "--sort=name")
	cmd.Env = append(os.Environ(), "HEATSINK_CLI_SELF=1", "KUBECONFIG=", "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2:\n%s", err, out)
	}
	want := "kubectl heatsink top: --sort=\"name\": want one of [heat reads writes bytes size]\nRun 'kubectl heatsink top --help' for usage.\n"
	if string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
	cmd = exec.Command(link, "top", "--help")
	cmd.Env = append(os.Environ(), "HEATSINK_CLI_SELF=1")
	if out, err := cmd.Output(); err != nil || !strings.HasPrefix(string(out), "Usage: kubectl heatsink top [policy] [flags]") {
		t.Errorf("help: %v\n%s", err, out)
	}
}
