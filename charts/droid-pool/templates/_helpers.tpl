{{/* Names, labels and the image reference shared by every template. */}}

{{- define "droid-pool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: "<release>" when it already contains the chart name. */}}
{{- define "droid-pool.fullname" -}}
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

{{- define "droid-pool.operatorName" -}}
{{- printf "%s-operator" (include "droid-pool.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object the chart renders. */}}
{{- define "droid-pool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "droid-pool.podLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The part of droid-pool.labels pod templates get (beside name and instance): a label that
changes with the chart's version would restart every pod on a chart upgrade. */}}
{{- define "droid-pool.podLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: droid-pool
{{- end }}

{{- define "droid-pool.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "droid-pool.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The PoolConfig of pooler.enabled; the operator names its Deployment and Service alike. */}}
{{- define "droid-pool.poolerName" -}}
{{- default (printf "%s-pooler" (include "droid-pool.fullname" .)) .Values.pooler.name }}
{{- end }}

{{- define "droid-pool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "droid-pool.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image with both binaries; the tag defaults to the chart's appVersion. */}}
{{- define "droid-pool.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* A restricted-profile container securityContext: what both binaries run with. */}}
{{- define "droid-pool.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The namespaces the operator watches, comma-separated; empty: every namespace (scope
cluster). operator.watchNamespace, deprecated, is scope namespace with that one. */}}
{{- define "droid-pool.watchNamespaces" -}}
{{- if .Values.operator.watchNamespace }}
{{- .Values.operator.watchNamespace }}
{{- else if eq .Values.operator.scope "namespace" }}
{{- default (list .Release.Namespace) .Values.operator.watchNamespaces | uniq | join "," }}
{{- end }}
{{- end }}

{{/* --allowed-images: the values', else this chart's image exactly. */}}
{{- define "droid-pool.allowedImages" -}}
{{- if .Values.operator.allowedImages }}
{{- join "," .Values.operator.allowedImages }}
{{- else }}
{{- include "droid-pool.image" . }}
{{- end }}
{{- end }}

{{/* The namespaces whose operator-deployed poolers get the chart's NetworkPolicy,
comma-separated: networkPolicy.namespaces, else the release namespace (with pooler.enabled)
and the watched namespaces (operator scope namespace). */}}
{{- define "droid-pool.poolerPolicyNamespaces" -}}
{{- if .Values.networkPolicy.namespaces }}
{{- join "," .Values.networkPolicy.namespaces }}
{{- else }}
{{- $out := list }}
{{- if .Values.pooler.enabled }}
{{- $out = append $out .Release.Namespace }}
{{- end }}
{{- with include "droid-pool.watchNamespaces" . }}
{{- $out = concat $out (splitList "," .) }}
{{- end }}
{{- $out | uniq | join "," }}
{{- end }}
{{- end }}

{{/* NetworkPolicy peers: Prometheus, as networkPolicy.prometheus selects it. */}}
{{- define "droid-pool.prometheusPeer" -}}
namespaceSelector:
  {{- toYaml .Values.networkPolicy.prometheus.namespaceSelector | nindent 2 }}
podSelector:
  {{- toYaml .Values.networkPolicy.prometheus.podSelector | nindent 2 }}
{{- end }}

{{/* Who may reach a pooler's admin port 9127 (a list of NetworkPolicy peers): Prometheus, the
operator's pods (in networkPolicy.operatorNamespace, default the release namespace; they ask
/status) and networkPolicy.extraAdminFrom. */}}
{{- define "droid-pool.adminPeers" -}}
- {{ include "droid-pool.prometheusPeer" . | nindent 2 | trim }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ default .Release.Namespace .Values.networkPolicy.operatorNamespace }}
  podSelector:
    matchLabels:
      app.kubernetes.io/name: {{ include "droid-pool.name" . }}-operator
      app.kubernetes.io/component: operator
{{- with .Values.networkPolicy.extraAdminFrom }}
{{ toYaml . }}
{{- end }}
{{- end }}
