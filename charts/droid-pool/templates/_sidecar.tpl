{{/*
The droid-pool native sidecar (Kubernetes >= 1.29): an initContainers entry with
restartPolicy: Always, so it starts before the application, stays up beside it, and gets its
SIGTERM only after the application's containers have exited.

Usage, in an application's pod template (this chart as a dependency, or a copy of this file):

  spec:
    terminationGracePeriodSeconds: 45   # app drain + pooler accept_window + margin (see README)
    initContainers:
      {{- include "droid-pool.sidecar" (dict "root" $ "configMap" "orders-pooler") | nindent 6 }}
    containers:
      - name: app
        env:
          - name: DATABASE_URL
            value: postgres://app@127.0.0.1:6432/app
    volumes:
      {{- include "droid-pool.sidecarVolumes" (dict "root" $ "configMap" "orders-pooler" "passwordSecret" "orders-db") | nindent 6 }}

Arguments (a dict): root (the chart context, for the image and .Values.sidecar defaults);
configMap (required: the ConfigMap with key droid-pool.yaml, e.g. the one a PoolConfig with a
sidecar target renders); passwordSecret (optional: the Secret of the PoolConfig's
spec.server.passwordSecret, mounted at /var/run/droid-pool/server where the operator's rendered
server.password_file points); passwordKey (optional, default "password": the Secret key, which
is also the file name); clientPasswordsSecret (optional: the PoolConfig's
spec.clientAuth.passwordsSecret for md5/scram-sha-256 clients, mounted at
/var/run/droid-pool/client-passwords); resources (optional, defaults to .Values.sidecar.resources).

The ConfigMap is mounted as a directory, never with subPath: the kubelet then swaps its ..data
symlink on a change and the pooler hot-reloads it; a subPath mount would never see an update.
*/}}
{{- define "droid-pool.sidecar" -}}
{{- $root := required "droid-pool.sidecar: root is required" .root -}}
{{- $cm := required "droid-pool.sidecar: configMap is required" .configMap -}}
{{- $sc := $root.Values.sidecar -}}
- name: {{ $sc.containerName }}
  image: {{ include "droid-pool.image" $root | quote }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  restartPolicy: Always
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
  readinessProbe:
    httpGet:
      path: /readyz
      port: pooler-admin
    periodSeconds: 2
    failureThreshold: 1
  resources:
    {{- toYaml (default $sc.resources .resources) | nindent 4 }}
  securityContext:
    {{- include "droid-pool.containerSecurityContext" $root | nindent 4 }}
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
{{- end }}
