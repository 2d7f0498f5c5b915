// Command workload is the end-to-end test's application: it runs in pods
// annotated for injection and talks to Redis only through the sidecar on
// 127.0.0.1:6380, as the README tells applications to; or, with --cluster,
// in pods without the sidecar, straight to the Redis Cluster's nodes, as an
// application heatsink has not touched (the capture's scenario). It reads background
// keys from the start and, once told (POST /viral), a viral read key and a
// viral counter (INCR), each at a bounded rate. GET /stats reports what it
// sent and what Redis acknowledged; POST /stop ends the traffic and reads
// the counter back through the sidecar. It exits by itself after
// --max-duration, so a forgotten pod sends nothing for long.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

type stats struct {
	Gets, GetErrors           int64
	ViralGets, ViralGetErrors int64
	IncrAcked, IncrErrors     int64
	LastError                 string
	Viral, Stopped            bool
	// CounterRead is the counter read through the sidecar after POST /stop
	// (-1 before); CounterReadError why it could not be.
	CounterRead      int64
	CounterReadError string
}

type workload struct {
	rdb                         redis.UniversalClient
	readKey, counter, bgPrefix  string
	bgKeys                      int
	bgRate, viralRate, incrRate float64

	gets, getErrs, vgets, vgetErrs, acked, incrErrs atomic.Int64
	viral, stopped                                  atomic.Bool
	mu                                              sync.Mutex
	lastErr, counterErr                             string
	counterRead                                     int64
	stop                                            context.CancelFunc
	done                                            sync.WaitGroup
}

func (w *workload) fail(err error) {
	w.mu.Lock()
	w.lastErr = err.Error()
	w.mu.Unlock()
}

// loop runs op at most perSecond times a second over workers goroutines
// while ctx lasts and on() holds; a rate of 0 or less runs nothing.
func (w *workload) loop(ctx context.Context, perSecond float64, workers int, on func() bool, op func(context.Context)) {
	if perSecond <= 0 {
		return
	}
	lim := rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond/50)))
	for range workers {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			for ctx.Err() == nil {
				if err := lim.Wait(ctx); err != nil {
					return
				}
				if !on() {
					select {
					case <-ctx.Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				op(ctx)
			}
		}()
	}
}

func (w *workload) run(ctx context.Context) {
	always := func() bool { return true }
	viral := w.viral.Load
	w.loop(ctx, w.bgRate, 4, always, func(ctx context.Context) {
		key := fmt.Sprintf("%s%d", w.bgPrefix, rand.IntN(w.bgKeys))
		w.gets.Add(1)
		if err := w.rdb.Get(ctx, key).Err(); err != nil && err != redis.Nil && ctx.Err() == nil {
			w.getErrs.Add(1)
			w.fail(err)
		}
	})
	w.loop(ctx, w.viralRate, 4, viral, func(ctx context.Context) {
		w.vgets.Add(1)
		if err := w.rdb.Get(ctx, w.readKey).Err(); err != nil && err != redis.Nil && ctx.Err() == nil {
			w.vgetErrs.Add(1)
			w.fail(err)
		}
	})
	w.loop(ctx, w.incrRate, 4, viral, func(ctx context.Context) {
		// A context that outlives the test's stop, so that an INCR sent is
		// an INCR whose reply is counted (acknowledged or failed).
		if err := w.rdb.Incr(context.WithoutCancel(ctx), w.counter).Err(); err != nil {
			w.incrErrs.Add(1)
			w.fail(err)
			return
		}
		w.acked.Add(1)
	})
}

func (w *workload) snapshot() stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return stats{
		Gets: w.gets.Load(), GetErrors: w.getErrs.Load(),
		ViralGets: w.vgets.Load(), ViralGetErrors: w.vgetErrs.Load(),
		IncrAcked: w.acked.Load(), IncrErrors: w.incrErrs.Load(),
		LastError: w.lastErr, Viral: w.viral.Load(), Stopped: w.stopped.Load(),
		CounterRead: w.counterRead, CounterReadError: w.counterErr,
	}
}

// halt stops the traffic, waits for every command in flight, and reads the
// counter back through the sidecar.
func (w *workload) halt() {
	if w.stopped.Swap(true) {
		return
	}
	w.stop()
	w.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := w.rdb.Get(ctx, w.counter).Int64()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil && err != redis.Nil {
		w.counterErr = err.Error()
		return
	}
	w.counterRead = v
}

func main() {
	w := &workload{counterRead: -1}
	addr := flag.String("redis", "127.0.0.1:6380", "Redis (the sidecar); with --cluster, the cluster's nodes, comma-separated")
	cluster := flag.Bool("cluster", false, "talk to a Redis Cluster directly (a cluster client), with no sidecar")
	listen := flag.String("listen", ":8080", "HTTP address for /stats, /viral, /stop")
	maxDur := flag.Duration("max-duration", 15*time.Minute, "stop sending after this long, whatever happens")
	flag.StringVar(&w.readKey, "read-key", "product:viral", "the viral read key")
	flag.StringVar(&w.counter, "counter", "likes:viral", "the viral counter")
	flag.StringVar(&w.bgPrefix, "background-prefix", "product:", "background keys are this prefix and a number")
	flag.IntVar(&w.bgKeys, "background-keys", 1000, "how many background keys")
	flag.Float64Var(&w.bgRate, "background-rate", 300, "background GETs per second")
	flag.Float64Var(&w.viralRate, "viral-rate", 600, "viral GETs per second, once viral")
	flag.Float64Var(&w.incrRate, "incr-rate", 200, "counter INCRs per second, once viral")
	flag.Parse()

	if *cluster {
		// No retries: every command sent is one the test can count (the
		// capture counts each command a client sends).
		w.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*addr, ","), PoolSize: 16,
			MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	} else {
		w.rdb = redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 16, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), *maxDur)
	w.stop = cancel
	w.run(ctx)
	go func() {
		<-ctx.Done()
		w.halt()
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(w.snapshot())
	})
	mux.HandleFunc("POST /viral", func(rw http.ResponseWriter, _ *http.Request) {
		w.viral.Store(true)
		rw.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /stop", func(rw http.ResponseWriter, _ *http.Request) {
		w.halt()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(w.snapshot())
	})
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	log.Printf("workload: redis %s, listening on %s", *addr, *listen)
	log.Fatal(http.ListenAndServe(*listen, mux))
}
