{{/* Chart name. */}}
{{- define "heatsink.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of namespaced object names: "heatsink" for a release named heatsink. */}}
{{- define "heatsink.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "heatsink.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "heatsink.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: heatsink
{{- end }}

{{- define "heatsink.selectorLabels" -}}
app.kubernetes.io/name: {{ include "heatsink.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "heatsink.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "heatsink.managerServiceAccount" -}}
{{- if .Values.serviceAccount.manager.create }}{{ default (printf "%s-manager" (include "heatsink.fullname" .)) .Values.serviceAccount.manager.name }}{{ else }}{{ default "default" .Values.serviceAccount.manager.name }}{{ end }}
{{- end }}

{{- define "heatsink.nodeAgentServiceAccount" -}}
{{- if .Values.serviceAccount.nodeAgent.create }}{{ default (printf "%s-node-agent" (include "heatsink.fullname" .)) .Values.serviceAccount.nodeAgent.name }}{{ else }}{{ default "default" .Values.serviceAccount.nodeAgent.name }}{{ end }}
{{- end }}

{{/* The webhook Service; its DNS name is in the serving certificate. */}}
{{- define "heatsink.webhookService" -}}
{{ include "heatsink.fullname" . }}-webhook-service
{{- end }}

{{- define "heatsink.webhookCertSecret" -}}
{{ include "heatsink.fullname" . }}-webhook-cert
{{- end }}

{{/* Webhook configurations have fixed names: the manager's RBAC (generated
     from kubebuilder markers) names them in resourceNames. */}}
{{- define "heatsink.mutatingWebhookConfiguration" -}}heatsink-mutating-webhook-configuration{{- end }}
{{- define "heatsink.validatingWebhookConfiguration" -}}heatsink-validating-webhook-configuration{{- end }}

{{- define "heatsink.fleetService" -}}
{{ include "heatsink.fullname" . }}-fleet
{{- end }}

{{- define "heatsink.fleetTokenSecret" -}}
{{ include "heatsink.fullname" . }}-fleet-token
{{- end }}

{{- define "heatsink.nodeAgentService" -}}
{{ include "heatsink.fullname" . }}-node-agent
{{- end }}

{{/* Where injected sidecars send their access counts. */}}
{{- define "heatsink.nodeAgentAddress" -}}
{{- if eq .Values.nodeAgent.ingestMode "service" -}}
{{- /* $(POD_NAMESPACE): the kubelet expands it in the manager's args. */ -}}
{{ include "heatsink.nodeAgentService" . }}.$(POD_NAMESPACE).svc:{{ .Values.nodeAgent.ingestPort }}
{{- else -}}
{{- /* $$ escapes the reference in the manager's own args; the kubelet expands
     it in the sidecar, from HEATSINK_NODE_IP (status.hostIP). */ -}}
$$(HEATSINK_NODE_IP):{{ .Values.nodeAgent.hostPorts.ingest }}
{{- end -}}
{{- end }}

{{/* The node agent's container ports: the node's (hostPorts) with the
     capture's host network, the pod's own otherwise. */}}
{{- define "heatsink.nodeAgentIngestPort" -}}
{{ ternary .Values.nodeAgent.hostPorts.ingest .Values.nodeAgent.ingestPort .Values.nodeAgent.capture.enabled }}
{{- end }}
{{- define "heatsink.nodeAgentMetricsPort" -}}
{{ ternary .Values.nodeAgent.hostPorts.metrics .Values.nodeAgent.metricsPort .Values.nodeAgent.capture.enabled }}
{{- end }}
{{- define "heatsink.nodeAgentProbePort" -}}
{{ ternary .Values.nodeAgent.hostPorts.probes .Values.nodeAgent.probePort .Values.nodeAgent.capture.enabled }}
{{- end }}
