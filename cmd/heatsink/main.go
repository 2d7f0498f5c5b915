// Command heatsink is the one binary of heatsink; its subcommands are the
// components: manager (control plane), detector (per node) and proxy
// (sidecar). The demo has its own binary (demo/heatsink-demo).
package main

import (
	"fmt"
	"os"
)

// subcommands maps a name to its entry point, which parses its own flags.
func subcommands() map[string]func(args []string) error {
	return map[string]func([]string) error{
		"manager":  runManager,
		"detector": runDetector,
		"proxy":    runProxy,
		"version":  runVersion,
	}
}

func main() {
	cmds := subcommands()
	if len(os.Args) < 2 || cmds[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: heatsink <manager|detector|proxy> [flags]\n")
		os.Exit(2)
	}
	if err := cmds[os.Args[1]](os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "heatsink %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
