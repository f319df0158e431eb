{{/*
The droid-pool native sidecar (Kubernetes >= 1.29): an initContainers entry with
restartPolicy: Always, so it starts before the application, stays up beside it, and gets its
SIGTERM only after the application's containers have exited.

A library-style helper: everything comes from its arguments, nothing from .Values or .Chart.
Included from an application's chart that depends on this one, .Values and .Chart would be
the application's, not this chart's.

Usage, in an application's pod template (this chart as a dependency, or a copy of this file):

  spec:
    template:
      metadata:
        labels:
          app: orders
          {{- include "droid-pool.sidecarPodLabels" (dict "poolConfig" "orders") | nindent 10 }}
      spec:
        terminationGracePeriodSeconds: 45   # app drain + pooler accept_window + margin (see README)
        {{- $sidecar := dict "configMap" "orders-pooler" "passwordSecret" "orders-db" "poolConfig" "orders" "kubeVersion" $.Capabilities.KubeVersion.Version }}
        {{- with include "droid-pool.sidecarInitContainers" $sidecar }}
        initContainers:
          {{- . | nindent 10 }}
        {{- end }}
        containers:
          {{- with include "droid-pool.sidecarContainers" $sidecar }}
          {{- . | nindent 10 }}
          {{- end }}
          - name: app
            env:
              - name: DATABASE_URL
                value: postgres://app@127.0.0.1:6432/app
        volumes:
          {{- include "droid-pool.sidecarVolumes" $sidecar | nindent 10 }}

Arguments (a dict; all but configMap optional):
  configMap              required: the ConfigMap with key droid-pool.yaml, e.g. the one a
                         PoolConfig with a sidecar target renders (spec.target.sidecar.configMapName)
  passwordSecret         the Secret of the PoolConfig's spec.server.passwordSecret, mounted at
                         /var/run/droid-pool/server where the operator's server.password_file points
  passwordKey            the Secret key, also the file name (default "password")
  clientPasswordsSecret  the PoolConfig's spec.clientAuth.passwordsSecret (md5/scram-sha-256
                         clients), mounted at /var/run/droid-pool/client-passwords
  poolConfig             the PoolConfig's name: its admin Secret <poolConfig>-admin, which the
                         operator makes (keys token and mock-secret), is mounted read-only at
                         /var/run/droid-pool/admin. The operator points the config at those files
                         (admin.token_file, auth.mock_secret_file) only once every pod its
                         podSelector selects mounts them; until then the control routes
                         (POST /console, /reload, /drain) stay off (403).
  adminSecret            instead of poolConfig: the name of a Secret of your own with keys token
                         (at least 16 characters) and mock-secret, for a config not rendered by
                         the operator (set admin.token_file and auth.mock_secret_file in it)
  image                  a reference string, or a dict like this chart's .Values.image
                         (repository, tag, digest, pullPolicy); default: the image of this
                         chart's appVersion (droid-pool.sidecarDefaultImage)
  imagePullPolicy        default: image.pullPolicy, else IfNotPresent
  containerName          default "droid-pool"
  resources              default: requests cpu 50m / memory 32Mi, limit memory 128Mi
  kubeVersion            the cluster's version ($.Capabilities.KubeVersion.Version): from 1.29
                         on the sidecar is native, before it a classic container (below)
  native                 true or false: the form, whatever the version
  root                   the caller's root context ($): its .Capabilities.KubeVersion stands in
                         for kubeVersion; nothing else of it is read
With neither kubeVersion, native nor root, the sidecar is native (as before these arguments).

Before Kubernetes 1.29 (no native sidecars) droid-pool.sidecar renders a classic container,
which droid-pool.sidecarContainers places first in the pod's containers (and
droid-pool.sidecarInitContainers renders nothing): the kubelet starts it before the
application, and on a delete sends SIGTERM to both at once. The drain is then the pooler's
own: readiness down, new connections still accepted for drain.accept_window, the
application's open sessions served to their transaction boundary (drain.mode) until they
close or drain.timeout; give terminationGracePeriodSeconds the same budget as for the native
form. There is no preStop: the image has no shell, and the sleep action needs 1.29 too.
Use the two list helpers in both places, as in the usage above, and the same chart serves
both kinds of cluster.
The ports are those the operator's rendered config sets: PostgreSQL on 127.0.0.1:6432, the
admin server (probes, /metrics; the control routes with the admin token) on 0.0.0.0:9127,
container port "pooler-admin". Other pods can reach 9127: give the application's pod a
NetworkPolicy that admits it from Prometheus and the operator only (the sidecar example in
templates/sidecar-example.yaml has one).

The ConfigMap is mounted as a directory, never with subPath: the kubelet then swaps its ..data
symlink on a change and the pooler hot-reloads it; a subPath mount would never see an update.
*/}}

{{/* This chart's image at its appVersion. A literal: in a parent chart .Chart is the parent's.
scripts/check_packaging.py fails when the tag differs from Chart.yaml's appVersion. */}}
{{- define "droid-pool.sidecarDefaultRepository" -}}ghcr.io/droid-pool/droid-pool{{- end }}
{{- define "droid-pool.sidecarDefaultTag" -}}0.1.0{{- end }}
{{- define "droid-pool.sidecarDefaultImage" -}}
{{- printf "%s:%s" (include "droid-pool.sidecarDefaultRepository" .) (include "droid-pool.sidecarDefaultTag" .) }}
{{- end }}

{{/* The image reference of the sidecar's "image" argument (see above). */}}
{{- define "droid-pool.sidecarImage" -}}
{{- $img := .image | default dict }}
{{- if kindIs "string" $img }}
{{- $img }}
{{- else if $img.digest }}
{{- printf "%s@%s" (default (include "droid-pool.sidecarDefaultRepository" .) $img.repository) $img.digest }}
{{- else }}
{{- printf "%s:%s" (default (include "droid-pool.sidecarDefaultRepository" .) $img.repository) (default (include "droid-pool.sidecarDefaultTag" .) $img.tag) }}
{{- end }}
{{- end }}

{{/* Pod labels for a pod with the sidecar: the PodMonitor's default selector
(metrics.podMonitor.sidecarSelector), and the PoolConfig name it copies into the poolconfig
label of the pooler's metrics. Arguments: poolConfig (required). */}}
{{- define "droid-pool.sidecarPodLabels" -}}
droidpool.io/pooler: sidecar
droidpool.io/poolconfig: {{ required "droid-pool.sidecarPodLabels: poolConfig is required" .poolConfig | quote }}
{{- end }}

{{/* "true" when the sidecar is native (an init container with restartPolicy: Always), else
empty: the native argument, else kubeVersion (or root's .Capabilities) >= 1.29, else native. */}}
{{- define "droid-pool.sidecarNative" -}}
{{- $v := .kubeVersion | default "" }}
{{- if and (not $v) .root }}{{ $v = .root.Capabilities.KubeVersion.Version }}{{ end }}
{{- if hasKey . "native" }}{{ if .native }}true{{ end }}
{{- else if not $v }}true
{{- else if semverCompare ">=1.29.0-0" $v }}true
{{- end }}
{{- end }}

{{/* The sidecar as a list of init containers: the native sidecar, or nothing before 1.29. */}}
{{- define "droid-pool.sidecarInitContainers" -}}
{{- if include "droid-pool.sidecarNative" . }}
{{- include "droid-pool.sidecar" . }}
{{- end }}
{{- end }}

{{/* The sidecar as a list of containers (place it first): the classic container before 1.29,
or nothing where the sidecar is native. */}}
{{- define "droid-pool.sidecarContainers" -}}
{{- if not (include "droid-pool.sidecarNative" .) }}
{{- include "droid-pool.sidecar" . }}
{{- end }}
{{- end }}

{{- define "droid-pool.sidecar" -}}
{{- $cm := required "droid-pool.sidecar: configMap is required" .configMap -}}
{{- $img := .image | default dict }}
{{- $pullPolicy := .imagePullPolicy | default (and (kindIs "map" $img) $img.pullPolicy) | default "IfNotPresent" }}
{{- $resources := .resources | default (dict "requests" (dict "cpu" "50m" "memory" "32Mi") "limits" (dict "memory" "128Mi")) -}}
- name: {{ .containerName | default "droid-pool" }}
  image: {{ include "droid-pool.sidecarImage" . | quote }}
  imagePullPolicy: {{ $pullPolicy }}
  {{- if include "droid-pool.sidecarNative" . }}
  restartPolicy: Always
  {{- end }}
  args: ["--config", "/etc/droid-pool/droid-pool.yaml"]
  ports:
    - name: pooler-admin
      containerPort: 9127
      protocol: TCP
  startupProbe:
    httpGet:
      path: /startupz
      port: pooler-admin
    periodSeconds: 1
    failureThreshold: 30
  livenessProbe:
    httpGet:
      path: /livez
      port: pooler-admin
    periodSeconds: 10
    failureThreshold: 3
  # Three misses, not one: a single slow answer must not take the whole application pod out
  # of its Services' endpoints. A drain still leaves them at once (terminating pods are dropped).
  readinessProbe:
    httpGet:
      path: /readyz
      port: pooler-admin
    periodSeconds: 2
    failureThreshold: 3
  resources:
    {{- toYaml $resources | nindent 4 }}
  securityContext:
    {{- include "droid-pool.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: droid-pool-config
      mountPath: /etc/droid-pool
      readOnly: true
    {{- if .passwordSecret }}
    - name: droid-pool-server-password
      mountPath: /var/run/droid-pool/server
      readOnly: true
    {{- end }}
    {{- if .clientPasswordsSecret }}
    - name: droid-pool-client-passwords
      mountPath: /var/run/droid-pool/client-passwords
      readOnly: true
    {{- end }}
    {{- if include "droid-pool.sidecarAdminSecret" . }}
    - name: droid-pool-admin
      mountPath: /var/run/droid-pool/admin
      readOnly: true
    {{- end }}
{{- end }}

{{/* The admin Secret's name from the arguments: adminSecret, else <poolConfig>-admin, else
none. */}}
{{- define "droid-pool.sidecarAdminSecret" -}}
{{- if .adminSecret }}
{{- .adminSecret }}
{{- else if .poolConfig }}
{{- printf "%s-admin" .poolConfig }}
{{- end }}
{{- end }}

{{/* The volumes the sidecar mounts; same arguments as droid-pool.sidecar. */}}
{{- define "droid-pool.sidecarVolumes" -}}
{{- $cm := required "droid-pool.sidecarVolumes: configMap is required" .configMap -}}
- name: droid-pool-config
  configMap:
    name: {{ $cm }}
{{- if .passwordSecret }}
- name: droid-pool-server-password
  secret:
    secretName: {{ .passwordSecret }}
    items:
      - key: {{ default "password" .passwordKey }}
        path: {{ default "password" .passwordKey }}
{{- end }}
{{- if .clientPasswordsSecret }}
- name: droid-pool-client-passwords
  secret:
    secretName: {{ .clientPasswordsSecret }}
{{- end }}
{{- with include "droid-pool.sidecarAdminSecret" . }}
# Only the two keys the pooler reads; only the sidecar mounts the volume (the application's
# containers do not see it).
- name: droid-pool-admin
  secret:
    secretName: {{ . }}
    items:
      - key: token
        path: token
      - key: mock-secret
        path: mock-secret
{{- end }}
{{- end }}
