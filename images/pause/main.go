// Command pause is the end-to-end cluster's sandbox image: the first
// process of every pod, holding its namespaces open. It sleeps until told
// to stop and, as PID 1 of a pod that shares its process namespace, reaps
// the zombies reparented to it (what Kubernetes' own pause does, in Go).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
