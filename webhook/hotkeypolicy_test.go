package webhook_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestAdmission runs every invalid policy of the table against the real API
// server (OpenAPI schema, CEL rules and the validating webhook) and checks
// that each is rejected with its field and reason in the message, and that a
// valid policy is admitted with every default filled in.
func TestAdmission(t *testing.T) {
	cp := startAdmission(t)
	ctx := context.Background()

	invalid := map[string]struct {
		mutate    func(*v1alpha1.HotKeyPolicy)
		wantField string
		wantMsg   string
	}{
		"unknown mode": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mode = "Sometimes" },
			"spec.mode", "Unsupported value",
		},
		"no address": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{} },
			"spec.target.addresses", "should have at least 1 items",
		},
		"address without port (webhook)": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{"redis.default.svc"} },
			"spec.target.addresses[0]", "must be host:port",
		},
		"address with port out of range (webhook)": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{"redis:70000"} },
			"spec.target.addresses[0]", "from 1 to 65535",
		},
		"unterminated glob (webhook)": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Keys.Include = []string{"product:[ab"} },
			"spec.keys.include[0]", "no closing ']'",
		},
		"trailing escape in exclude (webhook)": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Keys.Exclude = []string{`session:\`} },
			"spec.keys.exclude[0]", "unfinished escape",
		},
		"bad label selector (webhook)": {
			func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.ClientSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near", Values: []string{"x"}}}}
			},
			"spec.clientSelector", "not a valid label selector operator",
		},
		"topK zero": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.TopK = -1 },
			"spec.detection.topK", "should be greater than or equal to 1",
		},
		"topK too large": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.TopK = 5000 },
			"spec.detection.topK", "should be less than or equal to 1000",
		},
		"report interval longer than window": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.ReportInterval = dur("20s") },
			"spec.detection", "reportInterval must not be longer than detection.window",
		},
		"cooldown shorter than sustainFor": {
			func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Thresholds.SustainFor = dur("10s")
				p.Spec.Thresholds.Cooldown = dur("5s")
			},
			"spec.thresholds", "cooldown must be at least thresholds.sustainFor",
		},
		"negative read threshold": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Thresholds.ReadsPerSecond = -5 },
			"spec.thresholds.readsPerSecond", "greater than or equal to 1",
		},
		"hysteresis over 90 percent": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Thresholds.HysteresisPercent = 95 },
			"spec.thresholds.hysteresisPercent", "less than or equal to 90",
		},
		"maxShards below 2": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.Split.MaxShards = 1 },
			"spec.mitigations.split.maxShards", "greater than or equal to 2",
		},
		"epoch below 1s": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.Split.Epoch = dur("500ms") },
			"spec.mitigations.split.epoch", "must be at least 1s",
		},
		"jitter over 50 percent": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.LocalCache.JitterPercent = 60 },
			"spec.mitigations.localCache.jitterPercent", "less than or equal to 50",
		},
		"zero schedule cache ttl (webhook)": {
			schedule(func(s *v1alpha1.Schedule) {
				s.Mitigation.LocalCache = &v1alpha1.ScheduledLocalCache{TTL: &metav1.Duration{}}
			}),
			"spec.schedules[0].mitigation.localCache.ttl", "greater than zero",
		},
		"malformed duration": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Detection.Window = metav1.Duration{Duration: -time.Second} },
			"spec.detection.window", "should match",
		},
		"every mitigation disabled": {
			func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Mitigations.Coalesce.Enabled = ptr.To(false)
				p.Spec.Mitigations.LocalCache.Enabled = ptr.To(false)
			},
			"spec.mitigations", "at least one mitigation must be enabled",
		},
		"pre-aggregate without split": {
			func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.PreAggregate.Enabled = ptr.To(true) },
			"spec.mitigations", "preAggregate needs mitigations.split.enabled",
		},
		"schedule with start and cron": {
			schedule(func(s *v1alpha1.Schedule) { s.Cron = "0 9 * * *" }),
			"spec.schedules[0]", "exactly one of start and cron",
		},
		"schedule with neither start nor cron": {
			schedule(func(s *v1alpha1.Schedule) { s.Start = nil }),
			"spec.schedules[0]", "exactly one of start and cron",
		},
		"schedule lead time not shorter than duration": {
			schedule(func(s *v1alpha1.Schedule) { s.LeadTime = dur("6h") }),
			"spec.schedules[0]", "leadTime must be shorter than its duration",
		},
		"schedule with a bad cron (webhook)": {
			schedule(func(s *v1alpha1.Schedule) { s.Start, s.Cron = nil, "61 * * * *" }),
			"spec.schedules[0].cron", "not a five-field cron expression",
		},
		"schedule with an unknown time zone (webhook)": {
			schedule(func(s *v1alpha1.Schedule) { s.Start, s.Cron, s.TimeZone = nil, "0 9 * * 1-5", "Mars/Olympus_Mons" }),
			"spec.schedules[0].timeZone", "unknown IANA time zone",
		},
		"schedule name not a DNS label": {
			schedule(func(s *v1alpha1.Schedule) { s.Name = "Black Friday" }),
			"spec.schedules[0].name", "should match",
		},
		"schedule replicates while replicate is disabled": {
			schedule(func(s *v1alpha1.Schedule) {
				s.Mitigation = v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 4}}
			}),
			"spec", "mitigations.replicate.enabled is false",
		},
		"schedule replicas over maxReplicas": {
			func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Mitigations.Replicate.Enabled = ptr.To(true)
				p.Spec.Mitigations.Replicate.MaxReplicas = 4
				schedule(func(s *v1alpha1.Schedule) {
					s.Mitigation = v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 8}}
				})(p)
			},
			"spec", "exceeds mitigations.replicate.maxReplicas",
		},
		"schedule without mitigation": {
			schedule(func(s *v1alpha1.Schedule) { s.Mitigation = v1alpha1.ScheduledMitigation{} }),
			"spec.schedules[0]", "must name at least one of",
		},
		"duplicate schedule names": {
			func(p *v1alpha1.HotKeyPolicy) { schedule()(p); schedule()(p) },
			"spec.schedules[1]", "Duplicate value",
		},
	}
	if len(invalid) < 15 {
		t.Fatalf("the table must hold at least 15 invalid policies, has %d", len(invalid))
	}
	for name, tc := range invalid {
		t.Run("rejects "+name, func(t *testing.T) {
			p := policy(strings.ReplaceAll(strings.ReplaceAll(strings.ToLower(name), " ", "-"), "(webhook)", "w"), tc.mutate)
			p.Name = strings.Trim(strings.ReplaceAll(p.Name, "--", "-"), "-()")
			err := cp.Client.Create(ctx, p)
			if err == nil {
				t.Fatalf("policy was admitted; want a rejection naming %s", tc.wantField)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				t.Fatalf("error is %v, want Invalid", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.wantField) || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("error %q\nwant it to name field %q and say %q", msg, tc.wantField, tc.wantMsg)
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

	t.Run("a schedule key outside spec.keys is admitted with a warning", func(t *testing.T) {
		p := policy("warns", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Keys.Include = []string{"likes:*"} }, schedule())
		if err := cp.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSamplesApplyWithKubectl applies config/samples with the real kubectl to
// the test API server, twice: the second apply must change nothing, which is
// what GitOps tools need (no drift from defaulting).
func TestSamplesApplyWithKubectl(t *testing.T) {
	cp := startAdmission(t)
	ctx := context.Background()
	for _, ns := range []string{"shop", "social"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	assets, err := controlplane.AssetsDir(cp.Root)
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl not built: run make envtest (%v)", err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	apply := func() string {
		t.Helper()
		cmd := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "--field-manager=gitops", "-k", filepath.Join(cp.Root, "config", "samples"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		return string(out)
	}
	apply()
	list := &v1alpha1.HotKeyPolicyList{}
	if err := cp.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("got %d policies from the samples, want 3", len(list.Items))
	}
	versions := map[string]string{}
	for _, p := range list.Items {
		versions[p.Namespace+"/"+p.Name] = p.ResourceVersion
	}
	apply()
	if err := cp.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if versions[p.Namespace+"/"+p.Name] != p.ResourceVersion {
			t.Errorf("re-applying %s/%s changed it (resourceVersion %s -> %s): defaulting causes drift", p.Namespace, p.Name, versions[p.Namespace+"/"+p.Name], p.ResourceVersion)
		}
	}
}
