package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
)

// costReplies runs the load with the capture on three ways per round
// (the order rotating): replies not followed, followed on one captured
// connection in capture.DefaultReplySampleEvery (the agent's default),
// and on every connection; and prints the capture's CPU per 100,000
// observed commands/s each way, with the ratios to replies off.
func costReplies(bench func() (float64, error), n *netns.Net, server netip.AddrPort, rounds, requests, clients, pipeline, keyspace int, sample uint32) error {
	def := uint32(capture.DefaultReplySampleEvery)
	fmt.Println("### Packet capture: following replies (big keys by read size)")
	fmt.Println()
	fmt.Printf("redis-benchmark SET+GET on %d random keys, %d connections, pipeline %d, %d requests per run, from a client namespace through an observer namespace to redis-server; per round the capture runs the same load three times: replies not followed, followed (headers only) on one captured connection in %d (the default), and on every one. `per 100k` is the capturing process's CPU (getrusage) per 100,000 observed commands/s; `ratio` that over replies off in the same round. redis-benchmark opens new connections for SET and for GET, %d in all per run, so at 1 in %d the connections whose replies are followed vary from round to round (`reply pkts`).\n\n",
		keyspace, clients, pipeline, requests, def, 2*clients, def)
	fmt.Printf("| round | per 100k, replies off | per 100k, 1 in %d | ratio | reply pkts | replies matched | per 100k, every conn | ratio | reply pkts | replies matched | kernel drops |\n", def)
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	modes := []uint32{0, def, 1}
	var r8, r1 []string
	for r := range rounds {
		per := map[uint32]float64{}
		st := map[uint32]capture.Stats{}
		var drops uint64
		for i := range modes {
			mode := modes[(i+r)%len(modes)]
			m, err := measure(bench, n, server, sample, mode, false)
			if err != nil {
				return err
			}
			per[mode] = m.cpuPct / (m.observed / 1e5)
			st[mode] = m.stats
			drops += m.stats.KernelDrops
		}
		sized := func(s capture.Stats) uint64 { return s.Replies + s.ReplyEstimated }
		fmt.Printf("| %d | %.2f | %.2f | %.3f | %d | %d | %.2f | %.3f | %d | %d | %d |\n", r+1,
			per[0], per[def], per[def]/per[0], st[def].ReplyPackets, sized(st[def]),
			per[1], per[1]/per[0], st[1].ReplyPackets, sized(st[1]), drops)
		r8 = append(r8, fmt.Sprintf("%.3f", per[def]/per[0]))
		r1 = append(r1, fmt.Sprintf("%.3f", per[1]/per[0]))
	}
	fmt.Printf("\nCPU per observed command, replies followed over not: 1 in %d: %s; every connection: %s.\n\n", def, strings.Join(r8, ", "), strings.Join(r1, ", "))
	return nil
}
