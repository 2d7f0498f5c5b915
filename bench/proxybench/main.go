// Command proxybench runs the proxy in-process with an optional CPU profile,
// for profiling the forwarding path under redis-benchmark:
//
//	go run ./hack/proxybench -listen 127.0.0.1:7400 -upstream 127.0.0.1:6379 -cpuprofile cpu.out
//
// It stops (and writes the profile) on SIGINT/SIGTERM.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7400", "listen address")
	upstream := flag.String("upstream", "127.0.0.1:6379", "comma-separated upstreams")
	cluster := flag.Bool("cluster", false, "upstream is a cluster")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	sharedConns := flag.Int("shared", 0, "multiplexed upstream connections (0: default, -1: none)")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	p, err := proxy.New(proxy.Config{Upstreams: strings.Split(*upstream, ","), Cluster: *cluster, SharedConns: *sharedConns})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := p.Serve(ctx, ln); err != nil {
		log.Print(err)
	}
}
