package controllers

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/capacity"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// Metrics are the reconciler's Prometheus metrics. Labels carry policy
// names and mitigation types, never Redis keys.
type Metrics struct {
	mitigated         *prometheus.GaugeVec
	decisions         *prometheus.CounterVec
	epoch             *prometheus.GaugeVec
	folds             *prometheus.CounterVec
	foldMoves         prometheus.Counter
	publications      prometheus.Counter
	reconcileDuration prometheus.Histogram

	// Per policy, from its status: what the alerts and the dashboard read.
	ready           *prometheus.GaugeVec
	degraded        *prometheus.GaugeVec
	staleNodes      *prometheus.GaugeVec
	publishFailures *prometheus.CounterVec
	routingVersion  *prometheus.GaugeVec

	// Per policy and Redis node (address, never a key): learned capacity.
	shardUtilization, shardCapacity, shardConfidence *prometheus.GaugeVec
	shardThreshold                                   *prometheus.GaugeVec

	// Per policy: keys at or over thresholds.valueBytes.
	bigKeys *prometheus.GaugeVec

	// Per policy, with the capture on: the endpoints its directive
	// carries, and the Services' pod endpoints left out by the cap.
	captureEndpoints, captureEndpointsDropped *prometheus.GaugeVec
}

// NewMetrics creates the metrics on reg. Registering twice on one registry
// (several managers in one test process) reuses the first collectors.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		mitigated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_mitigated_keys",
			Help: "Keys mitigated per policy and mitigation type (Observe mode: would be)."}, []string{"namespace", "policy", "type"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heatsink_manager_decisions_total",
			Help: "Mitigation decisions: keys that started or ended being mitigated."}, []string{"decision"}),
		epoch: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_epoch",
			Help: "Current split epoch number per policy."}, []string{"namespace", "policy"}),
		folds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heatsink_manager_fold_operations_total",
			Help: "Fold passes over retired split generations, by result (done, pending, error)."}, []string{"result"}),
		foldMoves: prometheus.NewCounter(prometheus.CounterOpts{Name: "heatsink_manager_fold_moves_total",
			Help: "Shard values moved into base keys by folds."}),
		publications: prometheus.NewCounter(prometheus.CounterOpts{Name: "heatsink_manager_routing_publications_total",
			Help: "Routing tables published with a new version."}),
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "heatsink_manager_reconcile_duration_seconds",
			Help: "Duration of one HotKeyPolicy reconcile.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_policy_ready",
			Help: "1 when the policy's Ready condition is True (routing table published, or computed in Observe mode)."}, []string{"namespace", "policy"}),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_policy_degraded",
			Help: "1 when the policy's Degraded condition is True (Redis unreachable, credentials missing, stale nodes...), by its reason."}, []string{"namespace", "policy", "reason"}),
		staleNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_stale_nodes",
			Help: "Nodes whose reports for the policy stopped while they listed candidates: their counts are ignored."}, []string{"namespace", "policy"}),
		publishFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heatsink_manager_routing_publish_failures_total",
			Help: "Reconcile passes that could not write the policy's routing ConfigMap."}, []string{"namespace", "policy"}),
		routingVersion: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_routing_version",
			Help: "Version of the policy's last published routing table (status.routingVersion)."}, []string{"namespace", "policy"}),
		shardUtilization: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_shard_utilization_ratio",
			Help: "Main-thread busy share of one CPU core of a Redis node over the last capacity sample."}, []string{"namespace", "policy", "address"}),
		shardCapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_shard_capacity_ops_per_second",
			Help: "Learned capacity of a Redis node for its observed command mix: commands per main-thread CPU-second."}, []string{"namespace", "policy", "address"}),
		shardConfidence: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_shard_capacity_confidence",
			Help: "Confidence (0..1) of the learned capacity: counted load CPU-seconds over 30."}, []string{"namespace", "policy", "address"}),
		shardThreshold: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_shard_threshold_per_second",
			Help: "Threshold in force for the keys of a Redis master, by direction (reads, writes) and source (Typed, Learned, Fallback)."}, []string{"namespace", "policy", "address", "direction", "source"}),
		bigKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_big_keys",
			Help: "Keys of the policy whose largest value seen is at or over thresholds.valueBytes (listed in its HotKeyReport)."}, []string{"namespace", "policy"}),
		captureEndpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_capture_endpoints",
			Help: "Endpoints in the policy's directive for capturing node agents: its target addresses, and the ClusterIPs and ready pod endpoints of the Services they name."}, []string{"namespace", "policy"}),
		captureEndpointsDropped: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_capture_endpoints_dropped",
			Help: "Pod endpoints of the Services the policy names that its directive leaves out (over agentlink.MaxEndpoints): their traffic is not captured."}, []string{"namespace", "policy"}),
	}
	m.mitigated = register(reg, m.mitigated)
	m.decisions = register(reg, m.decisions)
	m.epoch = register(reg, m.epoch)
	m.folds = register(reg, m.folds)
	m.foldMoves = register(reg, m.foldMoves)
	m.publications = register(reg, m.publications)
	m.reconcileDuration = register(reg, m.reconcileDuration)
	m.ready = register(reg, m.ready)
	m.degraded = register(reg, m.degraded)
	m.staleNodes = register(reg, m.staleNodes)
	m.publishFailures = register(reg, m.publishFailures)
	m.routingVersion = register(reg, m.routingVersion)
	m.shardUtilization = register(reg, m.shardUtilization)
	m.shardCapacity = register(reg, m.shardCapacity)
	m.shardConfidence = register(reg, m.shardConfidence)
	m.shardThreshold = register(reg, m.shardThreshold)
	m.bigKeys = register(reg, m.bigKeys)
	m.captureEndpoints = register(reg, m.captureEndpoints)
	m.captureEndpointsDropped = register(reg, m.captureEndpointsDropped)
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a programming error: two metrics with one name
	}
	return c
}

var mitigationTypes = []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache,
	v1alpha1.MitigationReplicaReads, v1alpha1.MitigationReplicate, v1alpha1.MitigationSplit, v1alpha1.MitigationPreAggregate, v1alpha1.MitigationRefreshAhead}

func (m *Metrics) observe(policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, now time.Time, out *decide.Output) {
	counts := map[v1alpha1.MitigationType]int{}
	for _, k := range out.Keys {
		for _, t := range k.Mitigations {
			counts[t]++
		}
	}
	for _, t := range mitigationTypes {
		m.mitigated.WithLabelValues(policy.Namespace, policy.Name, string(t)).Set(float64(counts[t]))
	}
	m.decisions.WithLabelValues("started").Add(float64(out.Started))
	m.decisions.WithLabelValues("ended").Add(float64(out.Ended))
	m.epoch.WithLabelValues(policy.Namespace, policy.Name).Set(float64(routing.EpochAt(now, spec.Mitigations.Split.Epoch.Milliseconds())))
}

// health exports what status says of the policy's health.
func (m *Metrics) health(policy *v1alpha1.HotKeyPolicy, st *v1alpha1.HotKeyPolicyStatus) {
	ns, name := policy.Namespace, policy.Name
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	m.ready.WithLabelValues(ns, name).Set(boolGauge(ready != nil && ready.Status == metav1.ConditionTrue))
	if ready != nil && ready.Reason == v1alpha1.ReasonPublishFailed {
		m.publishFailures.WithLabelValues(ns, name).Inc()
	} else {
		m.publishFailures.WithLabelValues(ns, name).Add(0) // the series exists from the start
	}
	m.degraded.DeletePartialMatch(prometheus.Labels{"namespace": ns, "policy": name})
	if d := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue {
		m.degraded.WithLabelValues(ns, name, d.Reason).Set(1)
	} else {
		m.degraded.WithLabelValues(ns, name, v1alpha1.ReasonHealthy).Set(0)
	}
	m.staleNodes.WithLabelValues(ns, name).Set(float64(st.StaleNodes))
	m.routingVersion.WithLabelValues(ns, name).Set(float64(st.RoutingVersion))
}

// shards exports the policy's capacity estimates, dropping nodes gone.
func (m *Metrics) shards(policy *v1alpha1.HotKeyPolicy, nodes []capacity.Node, th map[string]v1alpha1.InForce) {
	labels := prometheus.Labels{"namespace": policy.Namespace, "policy": policy.Name}
	for _, v := range []*prometheus.GaugeVec{m.shardUtilization, m.shardCapacity, m.shardConfidence, m.shardThreshold} {
		v.DeletePartialMatch(labels)
	}
	for _, n := range nodes {
		m.shardUtilization.WithLabelValues(policy.Namespace, policy.Name, n.Addr).Set(n.Utilization)
		m.shardCapacity.WithLabelValues(policy.Namespace, policy.Name, n.Addr).Set(n.Capacity)
		m.shardConfidence.WithLabelValues(policy.Namespace, policy.Name, n.Addr).Set(n.Confidence)
		if f, ok := th[n.Addr]; ok && !n.Replica {
			m.shardThreshold.WithLabelValues(policy.Namespace, policy.Name, n.Addr, "reads", string(f.Reads)).Set(float64(f.ReadsPerSecond))
			m.shardThreshold.WithLabelValues(policy.Namespace, policy.Name, n.Addr, "writes", string(f.Writes)).Set(float64(f.WritesPerSecond))
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// forget drops a deleted policy's series.
func (m *Metrics) forget(namespace, name string) {
	for _, t := range mitigationTypes {
		m.mitigated.DeleteLabelValues(namespace, name, string(t))
	}
	m.epoch.DeleteLabelValues(namespace, name)
	labels := prometheus.Labels{"namespace": namespace, "policy": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{m.ready, m.degraded, m.staleNodes, m.publishFailures, m.routingVersion, m.shardUtilization, m.shardCapacity, m.shardConfidence, m.shardThreshold, m.bigKeys, m.captureEndpoints, m.captureEndpointsDropped} {
		v.DeletePartialMatch(labels)
	}
}
