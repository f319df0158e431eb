{{/* The operator's rules: those of deploy/operator/clusterrole.yaml without the Lease rule (the
operator's tests run the controller bound to nothing else; scripts/check_packaging.py checks
this list against that file). */}}
{{- define "droid-pool.operatorRules" -}}
- apiGroups: [droidpool.io]
  resources: [poolconfigs]
  verbs: [get, list, watch]
- apiGroups: [droidpool.io]
  resources: [poolconfigs/status]
  verbs: [get, patch]
# Rendered config (server-side apply creates through PATCH).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create, patch, delete]
# Deployed poolers run as their own ServiceAccount (no token mounted).
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch, delete]
# Sidecar pods are counted for the connection budget.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# spec.server.cloudNativePG: the Cluster's status says when it switches over.
- apiGroups: [postgresql.cnpg.io]
  resources: [clusters]
  verbs: [get, list, watch]
# get: whether the referenced Secrets and keys exist (values are never read into the
# config), and the token of each PoolConfig's admin Secret; create: that Secret, once.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create]
# delete: a switch from the deployment target to sidecars removes the deployed poolers.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
