package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/webhook"
)

// policy builds a minimal valid policy and applies the mutators to it.
func policy(name string, mutate ...func(*v1alpha1.HotKeyPolicy)) *v1alpha1.HotKeyPolicy {
	p := &v1alpha1.HotKeyPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.HotKeyPolicySpec{
			Target: v1alpha1.RedisTarget{Addresses: []string{"redis.default.svc:6379"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func dur(s string) metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return metav1.Duration{Duration: d}
}

func schedule(mutate ...func(*v1alpha1.Schedule)) func(*v1alpha1.HotKeyPolicy) {
	return func(p *v1alpha1.HotKeyPolicy) {
		s := v1alpha1.Schedule{
			Name:       "sale",
			Start:      &metav1.Time{Time: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)},
			Duration:   dur("6h"),
			LeadTime:   dur("10m"),
			Keys:       []string{"product:1"},
			Mitigation: v1alpha1.ScheduledMitigation{Coalesce: true},
		}
		for _, m := range mutate {
			m(&s)
		}
		p.Spec.Schedules = append(p.Spec.Schedules, s)
	}
}

func startAdmission(t *testing.T) *controlplane.ControlPlane {
	cp := testenv.Start(t, controlplane.Options{Webhooks: true})
	testenv.RunManager(t, cp, func(mgr manager.Manager) error {
		return webhook.SetupHotKeyPolicyWebhook(mgr)
	})
	return cp
}

// row is one policy of an admission table: a typed policy changed by
// mutate, then raw JSON values set by path (what a YAML user can write and a
// typed Go client cannot, such as an explicit 0 or "1y"); name overrides the
// generated name.
type row struct {
	name      string
	mutate    func(*v1alpha1.HotKeyPolicy)
	raw       map[string]any
	wantField string
	wantMsg   string
}

// checkRows creates each invalid row (it must be refused with an error
// naming its field and message) and each valid row (it must be admitted),
// named prefix-invalid-N and prefix-valid-N.
func checkRows(t *testing.T, ctx context.Context, c client.Client, prefix string, invalid, valid map[string]row) {
	t.Helper()
	for i, name := range slices.Sorted(maps.Keys(invalid)) {
		tc := invalid[name]
		t.Run("rejects "+name, func(t *testing.T) {
			err := tc.create(ctx, c, fmt.Sprintf("%s-invalid-%d", prefix, i))
			if err == nil {
				t.Fatal("admitted")
			}
			if !strings.Contains(err.Error(), tc.wantField) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q lacks %q or %q", err, tc.wantField, tc.wantMsg)
			}
		})
	}
	for i, name := range slices.Sorted(maps.Keys(valid)) {
		tc := valid[name]
		t.Run("admits "+name, func(t *testing.T) {
			if err := tc.create(ctx, c, fmt.Sprintf("%s-valid-%d", prefix, i)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// create sends the row's policy to the API server as JSON.
func (r row) create(ctx context.Context, c client.Client, name string) error {
	if r.name != "" {
		name = r.name
	}
	p := policy(name)
	if r.mutate != nil {
		r.mutate(p)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		return err
	}
	for path, v := range r.raw {
		if err := setPath(u.Object, path, v); err != nil {
			return err
		}
	}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("HotKeyPolicy"))
	return c.Create(ctx, u)
}

// setPath sets a dotted path ("spec.schedules.0.start") in a JSON object.
func setPath(obj map[string]any, path string, v any) error {
	parts := strings.Split(path, ".")
	var cur any = obj
	for i, part := range parts {
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[part] = v
				return nil
			}
			if c[part] == nil {
				c[part] = map[string]any{}
			}
			cur = c[part]
		case []any:
			n, err := strconv.Atoi(part)
			if err != nil || n >= len(c) {
				return fmt.Errorf("%s: no index %q", path, part)
			}
			if last {
				c[n] = v
				return nil
			}
			cur = c[n]
		default:
			return fmt.Errorf("%s: %q is not an object", path, part)
		}
	}
	return nil
}

// getPath reads a dotted path from a JSON object.
func getPath(obj map[string]any, path string) (any, error) {
	var cur any = obj
	for _, part := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[part]
		case []any:
			n, err := strconv.Atoi(part)
			if err != nil || n >= len(c) {
				return nil, fmt.Errorf("%s: no index %q", path, part)
			}
			cur = c[n]
		default:
			return nil, fmt.Errorf("%s: %q is not an object", path, part)
		}
	}
	return cur, nil
}

// TestAdmission runs every invalid policy of the table against the real API
// server (OpenAPI schema, CEL rules and the validating webhook) and checks
// that each is rejected with its field and reason in the message; every
// policy of the valid table is admitted and stored as written.
func TestAdmission(t *testing.T) {
	cp := startAdmission(t)
	ctx := context.Background()

	invalid := map[string]row{
		"unknown mode": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mode = "Sometimes" },
			wantField: "spec.mode", wantMsg: "Unsupported value",
		},
		"no address": {
			raw:       map[string]any{"spec.target.addresses": []any{}},
			wantField: "spec.target.addresses", wantMsg: "should have at least 1 items",
		},
		"database with a cluster": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Target.Cluster = true
				p.Spec.Target.Database = 2
			},
			wantField: "spec.target", wantMsg: "target.database must be 0 when target.cluster is true: a Redis Cluster has only database 0",
		},
		"database over 15": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Database = 16 },
			wantField: "spec.target.database", wantMsg: "should be less than or equal to 15",
		},
		"negative database": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Database = -1 },
			wantField: "spec.target.database", wantMsg: "should be greater than or equal to 0",
		},
		"neither addresses nor sentinel": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = nil },
			wantField: "spec.target", wantMsg: "exactly one of addresses",
		},
		"addresses and sentinel": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Sentinel = testSentinel() },
			wantField: "spec.target", wantMsg: "exactly one of addresses",
		},
		"sentinel with cluster": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Target = v1alpha1.RedisTarget{Sentinel: testSentinel(), Cluster: true}
			},
			wantField: "spec.target", wantMsg: "target.sentinel cannot be used with cluster: true",
		},
		"sentinel without master name": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Target = v1alpha1.RedisTarget{Sentinel: testSentinel()}
				p.Spec.Target.Sentinel.MasterName = ""
			},
			wantField: "spec.target.sentinel.masterName", wantMsg: "at least 1 chars long",
		},
		"sentinel address without port (webhook)": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Target = v1alpha1.RedisTarget{Sentinel: testSentinel()}
				p.Spec.Target.Sentinel.Addresses = []string{"sentinel.default.svc"}
			},
			wantField: "spec.target.sentinel.addresses[0]", wantMsg: "must be host:port",
		},
		"address without port (webhook)": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{"redis.default.svc"} },
			wantField: "spec.target.addresses[0]", wantMsg: "must be host:port",
		},
		"address with port out of range (webhook)": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{"redis:70000"} },
			wantField: "spec.target.addresses[0]", wantMsg: "from 1 to 65535",
		},
		"unterminated glob (webhook)": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Keys.Include = []string{"product:[ab"} },
			wantField: "spec.keys.include[0]", wantMsg: "no closing ']'",
		},
		"trailing escape in exclude (webhook)": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Keys.Exclude = []string{`session:\`} },
			wantField: "spec.keys.exclude[0]", wantMsg: "unfinished escape",
		},
		"topK zero": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.TopK = -1 },
			wantField: "spec.detection.topK", wantMsg: "should be greater than or equal to 1",
		},
		"topK too large": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.TopK = 5000 },
			wantField: "spec.detection.topK", wantMsg: "should be less than or equal to 1000",
		},
		"report interval longer than window": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.ReportInterval = dur("20s") },
			wantField: "spec.detection", wantMsg: "reportInterval must not be longer than detection.window",
		},
		"cooldown shorter than sustainFor": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Thresholds.SustainFor = dur("10s")
				p.Spec.Thresholds.Cooldown = dur("5s")
			},
			wantField: "spec.thresholds", wantMsg: "cooldown must be at least thresholds.sustainFor",
		},
		"negative read threshold": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Thresholds.ReadsPerSecond = -5 },
			wantField: "spec.thresholds.readsPerSecond", wantMsg: "greater than or equal to 1",
		},
		"auto target under 10 percent": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Thresholds.Auto = &v1alpha1.AutoThresholds{TargetUtilizationPercent: 5}
			},
			wantField: "spec.thresholds.auto.targetUtilizationPercent", wantMsg: "greater than or equal to 10",
		},
		"auto key share over 100 percent": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Thresholds.Auto = &v1alpha1.AutoThresholds{KeySharePercent: 101}
			},
			wantField: "spec.thresholds.auto.keySharePercent", wantMsg: "less than or equal to 100",
		},
		"hysteresis over 90 percent": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Thresholds.HysteresisPercent = 95 },
			wantField: "spec.thresholds.hysteresisPercent", wantMsg: "less than or equal to 90",
		},
		"maxShards below 2": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.Split.MaxShards = 1 },
			wantField: "spec.mitigations.split.maxShards", wantMsg: "greater than or equal to 2",
		},
		"epoch below 1s": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.Split.Epoch = dur("500ms") },
			wantField: "spec.mitigations.split.epoch", wantMsg: "must be a duration of at least 1s with a unit of ms, s, m or h, such as 60s",
		},
		"jitter over 50 percent": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.LocalCache.JitterPercent = 60 },
			wantField: "spec.mitigations.localCache.jitterPercent", wantMsg: "less than or equal to 50",
		},
		"refresh ahead over 50 percent": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.LocalCache.RefreshAheadPercent = ptr.To[int32](60) },
			wantField: "spec.mitigations.localCache.refreshAheadPercent", wantMsg: "less than or equal to 50",
		},
		"refresh window under 1ms": {
			raw:       map[string]any{"spec.mitigations.localCache.ttl": "5ms", "spec.mitigations.localCache.refreshAheadPercent": 10},
			wantField: "spec.mitigations.localCache", wantMsg: "refreshAheadPercent leaves a refresh window under 1ms",
		},
		"zero schedule cache ttl": {
			mutate: schedule(func(s *v1alpha1.Schedule) {
				s.Mitigation.LocalCache = &v1alpha1.ScheduledLocalCache{TTL: &metav1.Duration{}}
			}),
			wantField: "spec.schedules[0].mitigation.localCache.ttl", wantMsg: "such as 2s",
		},
		"negative duration": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.Window = metav1.Duration{Duration: -time.Second} },
			wantField: "spec.detection.window", wantMsg: "such as 10s",
		},
		"Enforce with every mitigation disabled": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Mode = v1alpha1.ModeEnforce
				p.Spec.Mitigations.Coalesce.Enabled = ptr.To(false)
				p.Spec.Mitigations.LocalCache.Enabled = ptr.To(false)
			},
			wantField: "spec", wantMsg: "mode Enforce needs at least one mitigation enabled",
		},
		"pre-aggregate without split": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.PreAggregate.Enabled = ptr.To(true) },
			wantField: "spec.mitigations", wantMsg: "preAggregate needs mitigations.split.enabled",
		},
		"schedule with start and cron": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.Cron = "0 9 * * *" }),
			wantField: "spec.schedules[0]", wantMsg: "exactly one of start and cron",
		},
		"schedule with neither start nor cron": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.Start = nil }),
			wantField: "spec.schedules[0]", wantMsg: "exactly one of start and cron",
		},
		"schedule lead time not shorter than duration": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.LeadTime = dur("6h") }),
			wantField: "spec.schedules[0]", wantMsg: "leadTime must be shorter than its duration",
		},
		"schedule with a bad cron (webhook)": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.Start, s.Cron = nil, "61 * * * *" }),
			wantField: "spec.schedules[0].cron", wantMsg: "not a five-field cron expression",
		},
		"schedule with an unknown time zone (webhook)": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.Start, s.Cron, s.TimeZone = nil, "0 9 * * 1-5", "Mars/Olympus_Mons" }),
			wantField: "spec.schedules[0].timeZone", wantMsg: "unknown IANA time zone",
		},
		"schedule name not a DNS label": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.Name = "Black Friday" }),
			wantField: "spec.schedules[0].name", wantMsg: "such as black-friday",
		},
		"schedule replicates while replicate is disabled": {
			mutate: schedule(func(s *v1alpha1.Schedule) {
				s.Mitigation = v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 4}}
			}),
			wantField: "spec", wantMsg: "mitigations.replicate.enabled is false",
		},
		"schedule coalesces while coalesce is disabled": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Mitigations.Coalesce.Enabled = ptr.To(false)
				p.Spec.Mitigations.LocalCache.Enabled = ptr.To(true)
				schedule()(p) // its mitigation is coalesce: true
			},
			wantField: "spec", wantMsg: "mitigations.coalesce.enabled is false",
		},
		"schedule replicas over maxReplicas": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Mitigations.Replicate.Enabled = ptr.To(true)
				p.Spec.Mitigations.Replicate.MaxReplicas = 4
				schedule(func(s *v1alpha1.Schedule) {
					s.Mitigation = v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 8}}
				})(p)
			},
			wantField: "spec", wantMsg: "exceeds mitigations.replicate.maxReplicas",
		},
		"schedule without mitigation": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.Mitigation = v1alpha1.ScheduledMitigation{} }),
			wantField: "spec.schedules[0]", wantMsg: "must name at least one of",
		},
		"duplicate schedule names": {
			mutate:    func(p *v1alpha1.HotKeyPolicy) { schedule()(p); schedule()(p) },
			wantField: "spec.schedules[1]", wantMsg: "Duplicate value",
		},
		// Explicit values are validated, never replaced by a default.
		"explicit zero thresholds": {
			raw:       map[string]any{"spec.thresholds": map[string]any{"readsPerSecond": 0, "writesPerSecond": 0}},
			wantField: "spec.thresholds.readsPerSecond", wantMsg: "greater than or equal to 1",
		},
		"explicit zero auto keySharePercent": {
			raw:       map[string]any{"spec.thresholds": map[string]any{"auto": map[string]any{"keySharePercent": 0}}},
			wantField: "spec.thresholds.auto.keySharePercent", wantMsg: "greater than or equal to 1",
		},
		"auto shardCPU of zero": {
			raw:       map[string]any{"spec.thresholds": map[string]any{"auto": map[string]any{"shardCPU": "0"}}},
			wantField: "spec.thresholds.auto.shardCPU", wantMsg: "must be over 0 and at most 1",
		},
		"auto shardCPU over one core": {
			raw:       map[string]any{"spec.thresholds": map[string]any{"auto": map[string]any{"shardCPU": "1500m"}}},
			wantField: "spec.thresholds.auto.shardCPU", wantMsg: "must be over 0 and at most 1",
		},
		"auto shardCPU as a whole number over one": {
			raw:       map[string]any{"spec.thresholds": map[string]any{"auto": map[string]any{"shardCPU": 2}}},
			wantField: "spec.thresholds.auto.shardCPU", wantMsg: "must be over 0 and at most 1",
		},
		"auto shardCPU not a quantity": {
			raw:       map[string]any{"spec.thresholds": map[string]any{"auto": map[string]any{"shardCPU": "half"}}},
			wantField: "spec.thresholds.auto.shardCPU", wantMsg: "should match",
		},
		"explicit zero maxShards": {
			raw:       map[string]any{"spec.mitigations.split.maxShards": 0},
			wantField: "spec.mitigations.split.maxShards", wantMsg: "greater than or equal to 2",
		},
		"explicit zero topK": {
			raw:       map[string]any{"spec.detection.topK": 0},
			wantField: "spec.detection.topK", wantMsg: "greater than or equal to 1",
		},
		"explicit zero perShardWritesPerSecond": {
			raw:       map[string]any{"spec.capacity.perShardWritesPerSecond": 0},
			wantField: "spec.capacity.perShardWritesPerSecond", wantMsg: "greater than or equal to 1",
		},
		"explicit zero maxReplicas": {
			raw:       map[string]any{"spec.mitigations.replicate.maxReplicas": 0},
			wantField: "spec.mitigations.replicate.maxReplicas", wantMsg: "greater than or equal to 2",
		},
		"explicit zero cache ttl": {
			raw:       map[string]any{"spec.mitigations.localCache.ttl": "0s"},
			wantField: "spec.mitigations.localCache.ttl", wantMsg: "must be a positive duration with a unit of ms, s, m or h, such as 2s",
		},
		"explicit zero reportInterval": {
			raw:       map[string]any{"spec.detection.reportInterval": "0s"},
			wantField: "spec.detection.reportInterval", wantMsg: "must be a positive duration with a unit of ms, s, m or h, such as 1s",
		},
		"explicit zero sustainFor": {
			raw:       map[string]any{"spec.thresholds.sustainFor": "0s"},
			wantField: "spec.thresholds.sustainFor", wantMsg: "must be a positive duration with a unit of ms, s, m or h, such as 2s",
		},
		"ttl without a unit": {
			raw:       map[string]any{"spec.mitigations.localCache.ttl": "0"},
			wantField: "spec.mitigations.localCache.ttl", wantMsg: "such as 2s",
		},
		// Bad durations and times name their field and show a valid value.
		"window without a unit": {
			raw:       map[string]any{"spec.detection.window": "60"},
			wantField: "spec.detection.window", wantMsg: "such as 10s",
		},
		"cooldown in years": {
			raw:       map[string]any{"spec.thresholds.cooldown": "1y"},
			wantField: "spec.thresholds.cooldown", wantMsg: "such as 5m",
		},
		"schedule duration in days": {
			mutate:    schedule(),
			raw:       map[string]any{"spec.schedules.0.duration": "2d"},
			wantField: "spec.schedules[0].duration", wantMsg: "such as 6h",
		},
		"schedule start in words": {
			mutate:    schedule(),
			raw:       map[string]any{"spec.schedules.0.start": "next friday"},
			wantField: "spec.schedules[0].start", wantMsg: "must be of type date-time",
		},
		// References and names that can never work.
		"credentials Secret name with capitals and underscore (webhook)": {
			raw:       map[string]any{"spec.target.credentialsSecretRef": map[string]any{"name": "Redis_Auth"}},
			wantField: "spec.target.credentialsSecretRef.name", wantMsg: "not a Secret name",
		},
		"credentials Secret without a name (webhook)": {
			raw:       map[string]any{"spec.target.credentialsSecretRef": map[string]any{}},
			wantField: "spec.target.credentialsSecretRef.name", wantMsg: "Required value",
		},
		"CA Secret name with a slash (webhook)": {
			raw:       map[string]any{"spec.target.tls": map[string]any{"caSecretRef": map[string]any{"name": "shop/redis-ca"}}},
			wantField: "spec.target.tls.caSecretRef.name", wantMsg: "not a Secret name",
		},
		"client certificate Secret name with a slash (webhook)": {
			raw:       map[string]any{"spec.target.tls": map[string]any{"clientCertSecretRef": map[string]any{"name": "shop/redis-client"}}},
			wantField: "spec.target.tls.clientCertSecretRef.name", wantMsg: "not a Secret name",
		},
		"name longer than a label value (webhook)": {
			name:      strings.Repeat("a", 64),
			wantField: "metadata.name", wantMsg: "must be at most 63 characters",
		},
		"name of 253 characters (webhook)": {
			name:      strings.Repeat("a", 253),
			wantField: "metadata.name", wantMsg: "must be at most 63 characters",
		},
		"spec larger than etcd stores (webhook)": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Keys.Include = []string{"*"}
				for i := range 32 {
					schedule(func(s *v1alpha1.Schedule) {
						s.Name = fmt.Sprintf("event-%d", i)
						s.Keys = make([]string, 256)
						for j := range s.Keys {
							s.Keys[j] = fmt.Sprintf("%d:%d:%s", i, j, strings.Repeat("k", 200))
						}
					})(p)
				}
			},
			wantField: "spec", wantMsg: "the spec is too large to store: at most 512 KiB",
		},
		"cron with its own time zone (webhook)": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.Start, s.Cron = nil, "CRON_TZ=Europe/Paris 0 9 * * *" }),
			wantField: "spec.schedules[0].cron", wantMsg: "set the time zone in timeZone",
		},
		"time zone on a one-off start (webhook)": {
			mutate:    schedule(func(s *v1alpha1.Schedule) { s.TimeZone = "Europe/Paris" }),
			wantField: "spec.schedules[0].timeZone", wantMsg: "timeZone applies to cron only",
		},
	}
	if len(invalid) < 15 {
		t.Fatalf("the table must hold at least 15 invalid policies, has %d", len(invalid))
	}
	names := slices.Sorted(maps.Keys(invalid))
	for i, name := range names {
		tc := invalid[name]
		t.Run("rejects "+name, func(t *testing.T) {
			err := tc.create(ctx, cp.Client, fmt.Sprintf("invalid-%d", i))
			if err == nil {
				t.Fatalf("policy was admitted; want a rejection naming %s", tc.wantField)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				t.Fatalf("error is %v, want Invalid", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.wantField+":") || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("error %q\nwant it to name field %q and say %q", msg, tc.wantField, tc.wantMsg)
			}
		})
	}

	valid := map[string]row{
		"Observe with every mitigation disabled": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Mode = v1alpha1.ModeObserve
				p.Spec.Mitigations.Coalesce.Enabled = ptr.To(false)
				p.Spec.Mitigations.LocalCache.Enabled = ptr.To(false)
			},
		},
		"no mode (Observe, the default) with every mitigation disabled": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Mitigations.Coalesce.Enabled = ptr.To(false)
				p.Spec.Mitigations.LocalCache.Enabled = ptr.To(false)
			},
		},
		"explicit zero percentages": {
			raw: map[string]any{"spec.thresholds.hysteresisPercent": 0, "spec.capacity.headroomPercent": 0, "spec.mitigations.localCache.jitterPercent": 0,
				"spec.mitigations.localCache.refreshAheadPercent": 0},
		},
		"refresh window of 1ms": {
			raw: map[string]any{"spec.mitigations.localCache.ttl": "10ms", "spec.mitigations.localCache.refreshAheadPercent": 10},
		},
		"auto shardCPU of 250m":     {raw: map[string]any{"spec.thresholds.auto.shardCPU": "250m"}},
		"auto shardCPU of one core": {raw: map[string]any{"spec.thresholds.auto.shardCPU": "1"}},
		"name of 63 characters":     {name: strings.Repeat("b", 63)},
		"database 15":               {raw: map[string]any{"spec.target.database": 15}},
		"explicit database 0 with a cluster": {
			raw: map[string]any{"spec.target.cluster": true, "spec.target.database": 0},
		},
		"sentinel target": {
			mutate: func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target = v1alpha1.RedisTarget{Sentinel: testSentinel()} },
		},
		"fractional durations": {
			raw: map[string]any{"spec.detection.window": "1.5m", "spec.thresholds.cooldown": "1h30m"},
		},
		"schedule start with an offset": {
			mutate: schedule(),
			raw:    map[string]any{"spec.schedules.0.start": "2026-11-27T00:00:00+01:00"},
		},
	}
	for i, name := range slices.Sorted(maps.Keys(valid)) {
		tc := valid[name]
		t.Run("admits "+name, func(t *testing.T) {
			if err := tc.create(ctx, cp.Client, fmt.Sprintf("valid-%d", i)); err != nil {
				t.Fatal(err)
			}
			if tc.raw == nil {
				return
			}
			// What the user wrote is stored as written: no default replaced it.
			n := tc.name
			if n == "" {
				n = fmt.Sprintf("valid-%d", i)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("HotKeyPolicy"))
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: n}, got); err != nil {
				t.Fatal(err)
			}
			for path, want := range tc.raw {
				if _, isMap := want.(map[string]any); isMap {
					continue
				}
				v, err := getPath(got.Object, path)
				if err != nil || fmt.Sprint(v) != fmt.Sprint(want) {
					t.Errorf("%s stored as %v (%v), want %v as written", path, v, err, want)
				}
			}
		})
	}

	t.Run("admits a minimal policy with every default applied", func(t *testing.T) {
		p := policy("minimal")
		if err := cp.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.HotKeyPolicy{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		want := policy("minimal").Spec
		v1alpha1.SetDefaults(&want)
		want.Thresholds.HysteresisPercent = v1alpha1.DefaultHysteresisPercent
		want.Capacity.HeadroomPercent = v1alpha1.DefaultHeadroomPercent
		want.Mitigations.LocalCache.JitterPercent = v1alpha1.DefaultJitterPercent
		if diff := cmp.Diff(want, got.Spec); diff != "" {
			t.Errorf("stored spec differs from the documented defaults (-want +got):\n%s", diff)
		}
	})

	t.Run("auto: {} is stored with its documented defaults, and no rate", func(t *testing.T) {
		p := policy("auto", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Thresholds.Auto = &v1alpha1.AutoThresholds{} })
		if err := cp.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.HotKeyPolicy{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		th := got.Spec.Thresholds
		want := v1alpha1.AutoThresholds{TargetUtilizationPercent: v1alpha1.DefaultTargetUtilizationPercent, KeySharePercent: v1alpha1.DefaultKeySharePercent}
		if th.Auto == nil || *th.Auto != want || th.ReadsPerSecond != 0 || th.WritesPerSecond != 0 || got.Spec.Capacity.PerShardReadsPerSecond != 0 || got.Spec.Capacity.PerShardWritesPerSecond != 0 {
			t.Fatalf("stored thresholds %+v (auto %+v), capacity %+v", th, th.Auto, got.Spec.Capacity)
		}
	})

	t.Run("target.database cannot be changed", func(t *testing.T) {
		p := policy("database", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Database = 2 })
		if err := cp.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		// Other fields of the target may change; the database may not.
		p.Spec.Target.Addresses = []string{"redis-2.default.svc:6379"}
		if err := cp.Client.Update(ctx, p); err != nil {
			t.Fatalf("changing the address: %v", err)
		}
		for _, db := range []int32{3, 0} {
			p.Spec.Target.Database = db
			err := cp.Client.Update(ctx, p)
			if err == nil || !strings.Contains(err.Error(), "spec.target.database:") || !strings.Contains(err.Error(), "target.database cannot be changed") {
				t.Fatalf("changing database 2 to %d: %v, want a refusal naming spec.target.database", db, err)
			}
		}
	})

	t.Run("a schedule key outside spec.keys is admitted with a warning", func(t *testing.T) {
		p := policy("warns", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Keys.Include = []string{"likes:*"} }, schedule())
		if err := cp.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
}

func testSentinel() *v1alpha1.RedisSentinel {
	return &v1alpha1.RedisSentinel{
		Addresses:  []string{"sentinel-0.default.svc:26379", "sentinel-1.default.svc:26379"},
		MasterName: "mymaster",
	}
}
