package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// fieldTests names, for every field of HotKeyPolicySpec, the test that sets
// it and observes what it promises ("dir TestName" or "dir TestName/sub
// test"), or why none is listed yet ("pending: ..."): every spec field must
// take effect or be removed.
var fieldTests = map[string]string{
	"mode":     "controllers TestHotKeyPolicyFlows/observe mode publishes nothing",
	"keyNames": "controllers TestHotKeyPolicyFlows/hashed key names: no raw key in status, report, Events or the routing ConfigMap; the data path still splits",

	"target.addresses":                          "webhook TestInjectIsCompleteAndIdempotent",
	"target.cluster":                            "webhook TestInjectIsCompleteAndIdempotent",
	"target.credentialsSecretRef.name":          "controllers TestHotKeyPolicyFlows/credentials from the Secret; missing ones degrade",
	"target.clusterTargetRef.name":              "test/install TestTenantReachesOnlyAllowedRedis",
	"target.serviceRef.name":                    "webhook TestInjectResolvesTargets",
	"target.serviceRef.port":                    "webhook TestInjectResolvesTargets",
	"target.tls.caSecretRef.name":               "webhook TestInjectIsCompleteAndIdempotent",
	"target.tls.clientCertSecretRef.name":       "controllers TestDialRedisClientCertificate",
	"target.tls.serverName":                     "webhook TestInjectIsCompleteAndIdempotent",
	"target.database":                           "controllers TestHotKeyPolicyFlows/a policy of database 2 publishes its database and folds there",
	"target.sentinel.addresses":                 "dataplane/sidecar TestSidecarFollowsSentinelFailover",
	"target.sentinel.masterName":                "dataplane/sidecar TestSidecarFollowsSentinelFailover",
	"target.sentinel.credentialsSecretRef.name": "controllers TestDialRedisThroughSentinel",

	"keys.include": "nodeagent TestAgentReportsToTheManager/a key over its threshold reaches the manager at the next tick",
	"keys.exclude": "nodeagent TestAgentReportsToTheManager/a key over its threshold reaches the manager at the next tick",

	"detection.window":         "nodeagent TestDetectionFieldsTakeEffect/window sets how long a key's traffic counts",
	"detection.topK":           "nodeagent TestDetectionFieldsTakeEffect/topK sets how many keys a node tracks, at least 256",
	"detection.reportInterval": "nodeagent TestDetectionFieldsTakeEffect/reportInterval sets how often a node summarises",

	"thresholds.readsPerSecond":    "controllers/decide TestEachSpecFieldChangesTheDecision/thresholds.readsPerSecond",
	"thresholds.writesPerSecond":   "controllers/decide TestEachSpecFieldChangesTheDecision/thresholds.writesPerSecond",
	"thresholds.sustainFor":        "controllers/decide TestEachSpecFieldChangesTheDecision/thresholds.sustainFor",
	"thresholds.cooldown":          "controllers/decide TestEachSpecFieldChangesTheDecision/thresholds.cooldown",
	"thresholds.hysteresisPercent": "controllers/decide TestEachSpecFieldChangesTheDecision/thresholds.hysteresisPercent",
	"thresholds.valueBytes":        "test/clients TestBigKeysListedFirstBySize",

	"thresholds.auto.keySharePercent":          "controllers/decide TestAutoFieldsTakeEffect/keySharePercent",
	"thresholds.auto.targetUtilizationPercent": "controllers/decide TestAutoFieldsTakeEffect/targetUtilizationPercent",
	"thresholds.auto.shardCPU":                 "demo TestAutoRelievesSmallShards",

	"capacity.perShardWritesPerSecond": "controllers/decide TestEachSpecFieldChangesTheDecision/capacity.perShardWritesPerSecond",
	"capacity.perShardReadsPerSecond":  "controllers/decide TestEachSpecFieldChangesTheDecision/capacity.perShardReadsPerSecond",
	"capacity.headroomPercent":         "controllers/decide TestEachSpecFieldChangesTheDecision/capacity.headroomPercent",
	"capacity.maxMitigatedKeys":        "controllers/decide TestEachSpecFieldChangesTheDecision/capacity.maxMitigatedKeys",

	"mitigations.coalesce.enabled":           "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.coalesce.enabled",
	"mitigations.localCache.enabled":         "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.localCache.enabled",
	"mitigations.localCache.ttl":             "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.localCache.ttl",
	"mitigations.localCache.jitterPercent":   "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.localCache.jitterPercent",
	"mitigations.localCache.maxEntries":      "controllers TestTableCarriesCacheSettings/mitigations.localCache.maxEntries",
	"mitigations.localCache.maxBytes":        "controllers TestTableCarriesCacheSettings/mitigations.localCache.maxBytes",
	"mitigations.localCache.tracking":        "controllers TestTableCarriesCacheSettings/mitigations.localCache.tracking",
	"mitigations.replicate.enabled":          "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.replicate.enabled",
	"mitigations.replicate.maxReplicas":      "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.replicate.maxReplicas",
	"mitigations.replicate.replicaTTL":       "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.replicate.replicaTTL",
	"mitigations.split.enabled":              "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.split.enabled",
	"mitigations.split.maxShards":            "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.split.maxShards",
	"mitigations.split.epoch":                "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.split.epoch",
	"mitigations.preAggregate.enabled":       "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.preAggregate.enabled",
	"mitigations.preAggregate.flushInterval": "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.preAggregate.flushInterval",

	"mitigations.localCache.refreshAheadPercent": "controllers/decide TestEachSpecFieldChangesTheDecision/mitigations.localCache.refreshAheadPercent",

	"mitigations.replicaReads.enabled":          "controllers/decide TestDecideReplicaReads/beyond one key, replica reads not allowed: copies",
	"mitigations.replicaReads.maxLag":           "controllers/decide TestDecideReplicaReads/beyond one key: replica reads after the cache, no copies",
	"mitigations.replicaReads.lagCheckInterval": "controllers TestReplicaSettings/standalone replicas and a check interval",
	"mitigations.replicaReads.addresses":        "controllers TestReplicaSettings/standalone replicas and a check interval",
	"schedules[].mitigation.replicaReads":       "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].mitigation.replicaReads",
	"mitigations.shed.enabled":                  "controllers/decide TestEachShedFieldChangesTheDecision/mitigations.shed.enabled",
	"mitigations.shed.budgetPercent":            "controllers/decide TestEachShedFieldChangesTheDecision/mitigations.shed.budgetPercent",
	"mitigations.shed.writesPerSecond":          "controllers/decide TestEachShedFieldChangesTheDecision/mitigations.shed.writesPerSecond",
	"mitigations.shed.readsPerSecond":           "controllers/decide TestEachShedFieldChangesTheDecision/mitigations.shed.readsPerSecond",
	"mitigations.shed.reads":                    "controllers/decide TestEachShedFieldChangesTheDecision/mitigations.shed.reads",
	"mitigations.shed.exclude":                  "controllers/decide TestEachShedFieldChangesTheDecision/mitigations.shed.exclude",
	"mitigations.shed.minPerSecond":             "controllers/decide TestEachShedFieldChangesTheDecision/mitigations.shed.minPerSecond",

	"schedules[].name":                          "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].name",
	"schedules[].start":                         "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].start",
	"schedules[].cron":                          "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].cron",
	"schedules[].timeZone":                      "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].timeZone",
	"schedules[].duration":                      "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].duration",
	"schedules[].leadTime":                      "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].leadTime",
	"schedules[].keys":                          "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].keys",
	"schedules[].mitigation.coalesce":           "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].mitigation.coalesce",
	"schedules[].mitigation.replicate.replicas": "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].mitigation.replicate.replicas",
	"schedules[].mitigation.localCache.ttl":     "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].mitigation.localCache.ttl",
	"schedules[].mitigation.split.shards":       "controllers/decide TestEachScheduleFieldChangesTheDecision/schedules[].mitigation.split.shards",
}

// specFields lists the JSON paths of every leaf field of t: durations,
// times, quantities, scalars, pointers to them and lists of scalars are leaves;
// structs are walked, lists of structs as "name[]".
func specFields(t reflect.Type, prefix string) []string {
	leaf := map[reflect.Type]bool{reflect.TypeOf(metav1.Duration{}): true, reflect.TypeOf(metav1.Time{}): true, reflect.TypeOf(resource.Quantity{}): true}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case leaf[ft]:
			out = append(out, path)
		case ft.Kind() == reflect.Struct:
			out = append(out, specFields(ft, path+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, specFields(ft.Elem(), path+"[].")...)
		default:
			out = append(out, path)
		}
	}
	return out
}

// TestEverySpecFieldIsTested checks that fieldTests lists exactly the
// fields of the spec, and that every test it names exists (the function in
// that package's tests, the subtest name in its file). Pending fields are
// logged: they are the open items of "every spec field takes
// effect".
func TestEverySpecFieldIsTested(t *testing.T) {
	r := root(t)
	fields := specFields(reflect.TypeOf(v1alpha1.HotKeyPolicySpec{}), "")
	sort.Strings(fields)
	var listed []string
	for f := range fieldTests {
		listed = append(listed, f)
	}
	sort.Strings(listed)
	if d := cmp.Diff(fields, listed); d != "" {
		t.Errorf("fieldTests and the spec's fields differ (-spec +fieldTests):\n%s", d)
	}
	for _, field := range listed {
		ref := fieldTests[field]
		if why, ok := strings.CutPrefix(ref, "pending: "); ok {
			t.Logf("%s: no test yet: %s", field, why)
			continue
		}
		dir, test, ok := strings.Cut(ref, " ")
		if !ok {
			t.Errorf("%s: %q is not \"dir TestName\"", field, ref)
			continue
		}
		fn, sub, _ := strings.Cut(test, "/")
		file := testFile(t, filepath.Join(r, dir), fn)
		if file == "" {
			t.Errorf("%s: no func %s in %s's tests", field, fn, dir)
			continue
		}
		// A test may take its subtests from tables in other files of its
		// package (the controllers' flows do), so any of them may name it.
		if sub != "" && !packageTestsName(t, filepath.Join(r, dir), `"`+sub+`"`) {
			t.Errorf("%s: %s has no subtest %q", field, fn, sub)
		}
	}
}

// packageTestsName reports whether any _test.go file of dir contains s.
func packageTestsName(t *testing.T, dir, s string) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

// testFile returns the _test.go file of dir that declares func name.
func testFile(t *testing.T, dir, name string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, path := range files {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == name {
				return path
			}
		}
	}
	return ""
}
