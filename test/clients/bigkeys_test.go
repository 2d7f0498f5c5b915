package clients

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestBigKeysListedFirstBySize: a 5 MB hash and a 20 MB string among 100,000
// small keys, loaded straight into a real redis-server, then read through a
// real sidecar a few times each, with many small keys and one hot small key:
// the node agent's summaries and the manager's HotKeyReport list the two
// first by size (the string, then the hash), the string marked big against
// a thresholds.valueBytes of 8 MiB and the hash not, whatever their rates (read a few times
// each, they may reach this test's low read threshold of 5/s or not); the
// hot small key is listed by rate, not before them by size; a BigKeys
// Warning Event names the string only.
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
			if m, err := c.HGetAll(ctx, "big:hash").Result(); err != nil || len(m) != hashFields {
				t.Fatalf("HGETALL big:hash through the sidecar: %d fields, %v", len(m), err)
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
	eventually.True(t, 60*time.Second, "the HotKeyReport lists big:str (big), then big:hash (not), first by size", func() bool {
		if err := s.pod.f.cp.Client.Get(ctx, key, &rep); err != nil {
			return false
		}
		b := rep.Spec.BigKeys
		// big as of the updated threshold (a report written before the
		// manager saw the update is rewritten once it did).
		if len(b) < 3 || b[0].Key != "big:str" || b[1].Key != "big:hash" || !b[0].Big || b[1].Big {
			read() // keep the keys in the node's view while the manager catches up
			return false
		}
		return true
	})
	b := rep.Spec.BigKeys
	t.Logf("bigKeys: %+v ... (%d listed); candidates: %d", b[:3], len(b), len(rep.Spec.Candidates))
	if b[0].ValueBytes < int64(strBytes) || !b[0].Big || b[1].ValueBytes < hashFields*fieldBytes || b[1].Big {
		t.Errorf("big keys %+v, want big:str ≥ %d bytes and big, big:hash ≥ %d bytes under thresholds.valueBytes %d", b[:2], strBytes, hashFields*fieldBytes, valueBytes)
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
