package clients

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/sizes"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestBigKeysListedFirstBySize: a 5 MB hash and a 20 MB string among 100,000
// small keys, loaded straight into a real redis-server, then read through a
// real sidecar a few times each (the hash one field at a time, 1,000 bytes a
// reply), with many small keys and one hot small key: the node agent's
// summaries and the manager's HotKeyReport list the two first by size (the
// string, then the hash), the manager confirms both with MEMORY USAGE at
// their size in Redis (the hash at 5 MB, not at the 1,000 bytes a read
// saw), at most its bound of calls (INFO commandstats), the string marked
// big against a thresholds.valueBytes of 8 MiB and the hash not, whatever
// their rates (read a few times each, they may reach this test's low read
// threshold of 5/s or not); the hot small key is listed by rate, not before
// them by size; a BigKeys Warning Event names the string only.
func TestBigKeysListedFirstBySize(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	up := upstream{name: "standalone", addrs: []string{srv.Addr}}
	ctx := context.Background()

	const nSmall = 100_000
	const hashFields, fieldBytes = 5000, 1000 // 5 MB
	strBytes := 20 << 20
	direct(t, up, func(c redis.UniversalClient) error {
		for from := 0; from < nSmall; from += 10_000 {
			pipe := c.Pipeline()
			for i := from; i < from+10_000; i++ {
				pipe.Set(ctx, fmt.Sprintf("small:%d", i), "v-"+fmt.Sprint(i), 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
		fields := make([]any, 0, 2*hashFields)
		val := strings.Repeat("h", fieldBytes)
		for i := 0; i < hashFields; i++ {
			fields = append(fields, fmt.Sprintf("f%d", i), val)
		}
		pipe := c.Pipeline()
		pipe.HSet(ctx, "big:hash", fields...)
		pipe.Set(ctx, "big:str", strings.Repeat("s", strBytes), 0)
		_, err := pipe.Exec(ctx)
		return err
	})
	if n := srvDBSize(t, up); n != nSmall+2 {
		t.Fatalf("redis holds %d keys, want %d", n, nSmall+2)
	}

	began := time.Now() // the policy is created next: the MEMORY USAGE bucket starts then
	s := startSidecar(t, up, "bigkeys", "")
	// Between the two sizes: the string is big, the hash is listed by size
	// but not big.
	const valueBytes = 8 << 20
	pol := &v1alpha1.HotKeyPolicy{}
	if err := s.pod.f.cp.Client.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: s.pod.policy}, pol); err != nil {
		t.Fatal(err)
	}
	patch := crclient.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"thresholds":{"valueBytes":%d}}}`, valueBytes)))
	if err := s.pod.f.cp.Client.Patch(ctx, pol, patch); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: 30 * time.Second})
	defer c.Close()
	read := func() {
		for i := 0; i < 3; i++ {
			if v, err := c.HGet(ctx, "big:hash", fmt.Sprintf("f%d", i)).Result(); err != nil || len(v) != fieldBytes {
				t.Fatalf("HGET big:hash through the sidecar: %d bytes, %v", len(v), err)
			}
			if v, err := c.Get(ctx, "big:str").Result(); err != nil || len(v) != strBytes {
				t.Fatalf("GET big:str through the sidecar: %d bytes, %v", len(v), err)
			}
		}
		pipe := c.Pipeline()
		for i := 0; i < 2000; i++ {
			pipe.Get(ctx, fmt.Sprintf("small:%d", i*50))
		}
		for i := 0; i < 200; i++ {
			pipe.Get(ctx, "small:7")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("small reads through the sidecar: %v", err)
		}
	}
	read()

	var rep v1alpha1.HotKeyReport
	key := crclient.ObjectKey{Namespace: namespace, Name: s.pod.policy}
	eventually.True(t, 60*time.Second, "the HotKeyReport lists big:str (big), then big:hash (not), first by size, both confirmed", func() bool {
		if err := s.pod.f.cp.Client.Get(ctx, key, &rep); err != nil {
			return false
		}
		b := rep.Spec.BigKeys
		// big as of the updated threshold (a report written before the
		// manager saw the update is rewritten once it did).
		// The hot small key is listed by rate in the same report: its
		// rate is of its last bursts, so the reads go on until a report
		// holds both.
		hot := false
		for _, cand := range rep.Spec.Candidates {
			hot = hot || cand.Key == "small:7" && cand.ReadsPerSecond >= readThreshold
		}
		if !hot || len(b) < 3 || b[0].Key != "big:str" || b[1].Key != "big:hash" || !b[0].Big || b[1].Big || b[0].MemoryBytes == 0 || b[1].MemoryBytes == 0 {
			read() // keep the keys in the node's view while the manager catches up
			return false
		}
		return true
	})
	b := rep.Spec.BigKeys
	t.Logf("bigKeys: %+v ... (%d listed); candidates: %d", b[:3], len(b), len(rep.Spec.Candidates))
	if b[0].ValueBytes < int64(strBytes) || !b[0].Big || b[1].ValueBytes < fieldBytes || b[1].ValueBytes > 2*fieldBytes || b[1].Big {
		t.Errorf("big keys %+v, want big:str ≥ %d bytes seen and big, big:hash about %d bytes seen (one HGET's reply), not big under thresholds.valueBytes %d", b[:2], strBytes, fieldBytes, valueBytes)
	}
	// Confirmed at their size in Redis: within [1, 1.5] × the payload.
	t.Logf("confirmed: big:str %d bytes (payload %d), big:hash %d bytes (payload %d, %d seen)", b[0].MemoryBytes, strBytes, b[1].MemoryBytes, hashFields*fieldBytes, b[1].ValueBytes)
	for _, c := range []struct {
		k     v1alpha1.BigKey
		truth int64
	}{{b[0], int64(strBytes)}, {b[1], hashFields * fieldBytes}} {
		if c.k.MemoryBytes < c.truth || float64(c.k.MemoryBytes) > 1.5*float64(c.truth) {
			t.Errorf("%s confirmed at %d bytes, want within [1, 1.5] × %d", c.k.Key, c.k.MemoryBytes, c.truth)
		}
	}
	// The bound: sizes.DefaultPerInterval keys a report interval (the
	// harness's default, 10 s), a burst of as many at the start.
	calls := memoryUsageCalls(t, up)
	elapsed := time.Since(began)
	bound := int(float64(sizes.DefaultPerInterval) * (1 + elapsed.Seconds()/controllers.DefaultReportInterval.Seconds()))
	t.Logf("MEMORY USAGE calls: %d over %v, bound %d", calls, elapsed.Round(time.Second), bound)
	if calls < 2 || calls > bound {
		t.Errorf("redis ran %d MEMORY USAGE over %v, want 2 (the two big keys) to %d", calls, elapsed, bound)
	}
	for _, k := range b[2:] {
		if k.Big || !strings.HasPrefix(k.Key, "small:") || k.ValueBytes >= 1<<10 {
			t.Errorf("after the two big keys: %+v, want small keys only", k)
		}
	}
	hot := false
	for _, cand := range rep.Spec.Candidates {
		hot = hot || cand.Key == "small:7" && cand.ReadsPerSecond >= readThreshold
	}
	if !hot {
		t.Errorf("the hot small key small:7 is not listed by rate: %+v", rep.Spec.Candidates[:min(3, len(rep.Spec.Candidates))])
	}
	eventually.True(t, 30*time.Second, "a BigKeys Warning Event names big:str", func() bool {
		var evs corev1.EventList
		if err := s.pod.f.cp.Client.List(ctx, &evs, crclient.InNamespace(namespace)); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == controllers.ReasonBigKeys && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == s.pod.policy &&
				strings.Contains(e.Message, `"big:str"`) {
				if strings.Contains(e.Message, `"big:hash"`) {
					t.Errorf("the Event names big:hash, under thresholds.valueBytes: %s", e.Message)
				}
				return true
			}
		}
		return false
	})
}

func srvDBSize(t *testing.T, up upstream) (n int64) {
	t.Helper()
	direct(t, up, func(c redis.UniversalClient) error {
		var err error
		n, err = c.DBSize(context.Background()).Result()
		return err
	})
	return n
}

// memoryUsageCalls is how many MEMORY USAGE the server ran (INFO
// commandstats).
func memoryUsageCalls(t *testing.T, up upstream) (n int) {
	t.Helper()
	direct(t, up, func(c redis.UniversalClient) error {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			return err
		}
		if m := regexp.MustCompile(`cmdstat_memory\|usage:calls=(\d+)`).FindStringSubmatch(info); m != nil {
			n, err = strconv.Atoi(m[1])
		}
		return err
	})
	return n
}
