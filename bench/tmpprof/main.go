package main

import (
	"context"
	"flag"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7400", "")
	up := flag.String("upstream", "127.0.0.1:6379", "")
	pp := flag.String("pprof", "127.0.0.1:7401", "")
	noloop := flag.Bool("noloop", false, "")
	flag.Parse()
	go http.ListenAndServe(*pp, nil)
	p, err := proxy.New(proxy.Config{Upstreams: []string{*up}, NoEventLoop: *noloop})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(p.Serve(context.Background(), ln))
}
