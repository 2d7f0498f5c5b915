//go:build e2e

package e2e

import (
	"bytes"
	"text/template"
)

// The objects the scenario applies, as a user would write them.

const redisNamespace, appNamespace, policyName = "redis", "shop", "hot"

// redisYAML is a 3-master Redis Cluster: a StatefulSet of Debian's
// redis-server (the e2e's Redis image) and a Service the policy targets.
const redisYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: redis}
---
apiVersion: v1
kind: Service
metadata: {name: redis, namespace: redis}
spec:
  selector: {app: redis}
  ports: [{name: redis, port: 6379}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: redis, namespace: redis}
spec:
  serviceName: redis
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: redis}}
  template:
    metadata: {labels: {app: redis}}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: redis
        image: {{.RedisImage}}
        args: [--port, "6379", --cluster-enabled, "yes", --cluster-config-file, /data/nodes.conf,
               --cluster-node-timeout, "5000", --save, "", --appendonly, "no", --protected-mode, "no"]
        ports: [{name: redis, containerPort: 6379}]
        readinessProbe:
          exec: {command: [/usr/bin/redis-cli, ping]}
          periodSeconds: 2
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {memory: 256Mi}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, emptyDir: {}}]
`

// targetYAML is the platform team's part: the Redis Cluster of namespace
// redis, approved for shop's policies (the install refuses raw addresses).
const targetYAML = `
apiVersion: heatsink.dev/v1alpha1
kind: ClusterRedisTarget
metadata: {name: redis-cluster}
spec:
  addresses: ["redis.redis.svc.cluster.local:6379"]
  cluster: true
  allowedNamespaces: {names: [shop]}
`

// policyYAML is the HotKeyPolicy: thresholds the workload's viral keys
// cross by a wide margin and its background keys never reach.
const policyYAML = targetYAML + `---
apiVersion: heatsink.dev/v1alpha1
kind: HotKeyPolicy
metadata: {name: hot, namespace: shop}
spec:
  mode: Enforce
  target:
    clusterTargetRef: {name: redis-cluster}
  keys:
    include: ["product:*", "likes:*"]
  detection: {window: 5s, topK: 16, reportInterval: 1s}
  thresholds: {readsPerSecond: 200, writesPerSecond: 60, sustainFor: 2s, cooldown: 5m}
  mitigations:
    coalesce: {enabled: true}
    localCache: {enabled: true, ttl: 1s}
    replicate: {enabled: true, maxReplicas: 3}
    split: {enabled: true, maxShards: 3, epoch: 5s}
  # 300 INCR/s over 100 per shard: three shards (the most allowed), one per master.
  capacity: {perShardWritesPerSecond: 100}
`

// appYAML is the application: opted in by one annotation, talking to the
// sidecar on 127.0.0.1:6380, with the Role docs/install.md tells users to
// grant so that the sidecar watches its routing table.
const appYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: app, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: heatsink-routing-hot, namespace: shop}
rules:
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [hot-routing]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: heatsink-routing-hot, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: heatsink-routing-hot}
subjects:
- {kind: ServiceAccount, name: app, namespace: shop}
`

const deploymentYAML = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: app}}
  template:
    metadata:
      labels: {app: app}
      annotations: {heatsink.dev/inject: hot}
    spec:
      serviceAccountName: app
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: app
        image: {{.WorkloadImage}}
        args: [--redis, "127.0.0.1:6380", --viral-rate, "500", --incr-rate, "150", --background-rate, "300"]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 2
        resources:
          requests: {cpu: 50m, memory: 32Mi}
          limits: {memory: 128Mi}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
`

func render(tmpl string, data any) []byte {
	var b bytes.Buffer
	template.Must(template.New("").Parse(tmpl)).Execute(&b, data)
	return b.Bytes()
}
