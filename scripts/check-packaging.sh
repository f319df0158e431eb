#!/usr/bin/env bash
# Validates everything droid-pool ships for Kubernetes, offline, with real tools (issue 9):
#   Dockerfile     hadolint; the image's promises (both binaries, STOPSIGNAL, EXPOSE, non-root,
#                  no shell in the runtime stage). No container engine here: it is not built.
#   Helm chart     helm lint --strict and helm template for the default values and each
#                  charts/droid-pool/ci/*-values.yaml; values that must be refused are refused
#   parent chart   tests/helm/parent-chart, an application's chart with this one as a dependency,
#                  built, linted and rendered: the sidecar helper works from another chart
#   manifests      kubernetes-validate -k 1.29.0 --strict (built-in kinds), validate_crs.py
#                  (PoolConfig against our CRD, NetworkChaos against Chaos Mesh's), the chart's
#                  promises (scripts/check_packaging.py), every kind accounted for
#   deploy/        kubectl kustomize of deploy/ and deploy/examples/, validated the same way;
#                  deploy/operator/operator.yaml and namespaced.yaml current
#                  (scripts/render-deploy.sh --check)
#   NetworkPolicy  every operator, operator-deployed pooler and sidecar pod we ship (chart
#                  renders, deploy/, tests/kind) is selected by a policy admitting only its
#                  ports from narrow peers: 6432 from clients, 9127 from Prometheus and the
#                  operator, the operator's metrics from Prometheus (check_packaging.py netpol);
#                  a render without policies must fail the check
#   Pod Security   every pod template we ship (chart renders, kustomize outputs, the game day's
#                  Job) against the restricted profile (check_packaging.py restricted); the
#                  1.20 API server below has no Pod Security admission to do it
#   chaos/         the Chaos Mesh manifests, the NetworkPolicy Job and its embedded script
#   API server     a real kube-apiserver (1.20, ../shared/tools/kube-apiserver): RBAC through its
#                  authorizer, PoolConfigs accepted, the game day's script run against it, the
#                  operator run as the chart's ServiceAccount (scripts/check-packaging-apiserver.sh)
#   Prometheus     promtool check rules, test rules, check config; every alert with severity,
#                  summary, description, a runbook in docs/runbooks.md, tests firing and quiet
#   Grafana        the dashboard's namespace/poolconfig variables filter every query; rate windows
#                  are $__rate_interval (check_packaging.py dashboard)
#   yamllint       every YAML file we write and every rendered manifest
#   shell          bash -n and shellcheck of tests/kind, chaos and these scripts
# Tools: scripts/ensure-k8s-tools.sh (run first). Output: target/packaging/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/shared.sh
source scripts/lib/shared.sh

bash scripts/ensure-k8s-tools.sh
VENV=$ROOT/target/k8s-venv
PY=$VENV/bin/python
HELM=$ROOT/target/k8s-bin/helm
KUBECTL=$ROOT/target/k8s-bin/kubectl
VALIDATE_CRS=$DROID_POOL_SHARED/tools/validate_crs.py
CHAOS_CRD=$DROID_POOL_SHARED/reference/chaos-mesh-networkchaos-crd.yaml
CRD=deploy/crds/poolconfig.yaml
CHART=charts/droid-pool
OUT=target/packaging
rm -rf "$OUT"
mkdir -p "$OUT/chart" "$OUT/kustomize" "$OUT/chaos"

section() { echo "check-packaging: -- $*"; }
die() {
  echo "check-packaging: FAIL: $*" >&2
  exit 1
}
for f in "$VALIDATE_CRS" "$CHAOS_CRD"; do
  [[ -f $f ]] || die "missing $f (the shared tools and references beside the repository)"
done

# kubernetes-validate for built-in kinds, then validate_crs.py for the custom ones; every
# document must be of a kind one of them (or check_packaging.py) validates.
validate_manifests() {
  "$VENV/bin/kubernetes-validate" -k 1.29.0 --strict --quiet --no-warn "$@" \
    || die "kubernetes-validate rejected $*"
  "$PY" "$VALIDATE_CRS" "$CRD" "$CHAOS_CRD" -- "$@" >"$OUT/validate_crs.log" \
    || {
      cat "$OUT/validate_crs.log" >&2
      die "validate_crs.py rejected a custom resource in $*"
    }
  "$PY" scripts/check_packaging.py kinds "$OUT/validate_crs.log" "$@" || die "unaccounted kinds in $*"
}

# --- Dockerfile ---------------------------------------------------------------
section "Dockerfile"
"$VENV/bin/hadolint" Dockerfile || die "hadolint"
bins=$(cargo metadata --no-deps --format-version 1 --offline \
  | "$PY" -c 'import json,sys; print(" ".join(t["name"] for p in json.load(sys.stdin)["packages"] for t in p["targets"] if "bin" in t["kind"]))')
# shellcheck disable=SC2086 # one argument per bin target
"$PY" scripts/check_packaging.py dockerfile Dockerfile $bins || die "Dockerfile"
for keep in Cargo.toml Cargo.lock src/ scripts/build-pgo.sh scripts/lib/pg.sh; do
  grep -qx "!$keep" .dockerignore || die ".dockerignore does not let $keep into the build context"
done

# --- the CRD: the operator's, the same in both places --------------------------
section "PoolConfig CRD"
[[ -f $CRD ]] || die "$CRD is missing (it comes from the operator's 'droid-pool-operator crd')"
cmp -s "$CRD" "$CHART/crds/poolconfig.yaml" || die "$CRD and $CHART/crds/poolconfig.yaml differ"
"$VENV/bin/kubernetes-validate" -k 1.29.0 --strict --quiet --no-warn "$CRD" || die "the CRD itself"

# --- Helm chart ---------------------------------------------------------------
section "helm lint + template (default and $CHART/ci/*-values.yaml)"
combos=(default)
for f in "$CHART"/ci/*-values.yaml; do
  combos+=("$f")
done
for combo in "${combos[@]}"; do
  args=()
  name=default
  if [[ $combo != default ]]; then
    args=(-f "$combo")
    name=$(basename "$combo" -values.yaml)
  fi
  "$HELM" lint --strict --quiet "$CHART" "${args[@]}" >"$OUT/lint-$name.log" 2>&1 \
    || {
      cat "$OUT/lint-$name.log" >&2
      die "helm lint --strict ($name)"
    }
  "$HELM" template droid-pool "$CHART" --namespace droid-pool-system "${args[@]}" \
    >"$OUT/chart/$name.yaml" || die "helm template ($name)"
  validate_manifests "$OUT/chart/$name.yaml"
done
"$PY" scripts/check_packaging.py chart "$OUT/chart" || die "the chart's promises"
# The checker must refuse its bad fixtures before its silence on our manifests means anything.
"$PY" scripts/check_packaging.py restricted --self-test || die "the restricted-profile checker's self-test"
"$PY" scripts/check_packaging.py restricted "$OUT"/chart/*.yaml || die "a chart render breaks the restricted profile"

# --- the sidecar helper from an application's chart -----------------------------
section "sidecar helper from a parent chart (tests/helm/parent-chart)"
# A copy, because helm dependency update writes charts/*.tgz and Chart.lock beside Chart.yaml.
# Its file://../../../charts/droid-pool resolves from $OUT/parent-chart as from tests/helm/.
parent=$OUT/parent-chart
cp -r tests/helm/parent-chart "$parent"
"$HELM" dependency update "$parent" >"$OUT/parent-dependency.log" 2>&1 \
  || {
    cat "$OUT/parent-dependency.log" >&2
    die "helm dependency update of the parent chart"
  }
"$HELM" lint --strict --quiet "$parent" >"$OUT/lint-parent.log" 2>&1 \
  || {
    cat "$OUT/lint-parent.log" >&2
    die "helm lint --strict (parent chart)"
  }
mkdir -p "$OUT/parent"
"$HELM" template orders "$parent" --namespace shop >"$OUT/parent/parent-chart.yaml" || die "helm template (parent chart)"
validate_manifests "$OUT/parent/parent-chart.yaml"
"$PY" scripts/check_packaging.py restricted "$OUT/parent/parent-chart.yaml" || die "the parent chart breaks the restricted profile"
"$PY" scripts/check_packaging.py parent "$OUT/parent/parent-chart.yaml" || die "the sidecar helper in the parent chart"
# Before 1.29 (no native sidecars; the node of tests/kind/e2e.sh runs 1.20) the same chart
# renders the classic container from the cluster's version.
"$HELM" template orders "$parent" --namespace shop --kube-version 1.20.2 >"$OUT/parent-classic.yaml" \
  || die "helm template --kube-version 1.20.2 (parent chart)"
validate_manifests "$OUT/parent-classic.yaml"
"$PY" scripts/check_packaging.py restricted "$OUT/parent-classic.yaml" || die "the classic sidecar breaks the restricted profile"
"$PY" scripts/check_packaging.py parent-classic "$OUT/parent-classic.yaml" || die "the classic sidecar helper in the parent chart"

# Values the schema or the templates must refuse, each with the message it must give.
refuse() {
  local want=$1
  shift
  local log=$OUT/refused.log
  if "$HELM" template droid-pool "$CHART" "$@" >"$log" 2>&1; then
    die "helm template accepted bad values: $*"
  fi
  grep -q -- "$want" "$log" || {
    cat "$log" >&2
    die "helm template refused $* without saying '$want'"
  }
}
refuse "pullPolicy" --set image.pullPolicy=Sometimes
refuse "additional properties 'replica' not allowed" --set operator.replica=2
refuse "exactly one of poolSize and maxServerConnections" --set pooler.enabled=true --set pooler.spec.poolSize=3
refuse "maxServerConnections" --set pooler.enabled=true --set pooler.spec.maxServerConnections=0
refuse "mode" --set pooler.enabled=true --set pooler.spec.mode=sometimes
refuse "clientAuth" --set pooler.enabled=true --set pooler.spec.clientAuth=null
refuse "serviceAccount.name is required" --set serviceAccount.create=false
refuse "needs metrics.service.enabled" --set metrics.serviceMonitor.enabled=true --set metrics.service.enabled=false
refuse "/tests/attempts" --set tests.attempts=0
refuse "tests.user is required" --set pooler.enabled=true --set pooler.spec.server.user=null
refuse "/operator/scope" --set operator.scope=everywhere
refuse "podSelector" --set pooler.enabled=true --set networkPolicy.clients.podSelector=null
refuse "/operator/allowedImages" --set 'operator.allowedImages={a b}'

section "NetworkPolicies (chart: checked with the chart's promises above; the check can tell)"
"$HELM" template droid-pool "$CHART" --namespace droid-pool-system -f "$CHART/ci/pooler-values.yaml" \
  -f "$CHART/ci/sidecar-example-values.yaml" --set networkPolicy.enabled=false >"$OUT/networkpolicy-off.yaml" \
  || die "helm template (networkPolicy.enabled=false)"
"$PY" scripts/check_packaging.py netpol --expect-failure "$OUT/networkpolicy-off.yaml" \
  || die "the NetworkPolicy check passed a render without policies"

# --- deploy/ (kustomize) -------------------------------------------------------
section "deploy/ (kubectl kustomize)"
bash scripts/render-deploy.sh --check || die "deploy/operator/operator.yaml is stale"
"$KUBECTL" kustomize deploy >"$OUT/kustomize/deploy.yaml" || die "kubectl kustomize deploy"
"$KUBECTL" kustomize deploy/examples >"$OUT/kustomize/examples.yaml" || die "kubectl kustomize deploy/examples"
validate_manifests "$OUT/kustomize/deploy.yaml" "$OUT/kustomize/examples.yaml"
grep -q "kind: PoolConfig" "$OUT/kustomize/examples.yaml" || die "deploy/examples has no PoolConfig"
# Every example file on its own too, also those the kustomization does not list.
examples=()
for f in deploy/examples/*.yaml deploy/operator/*.yaml; do
  [[ $(basename "$f") == kustomization.yaml || $f == deploy/operator/*values.yaml ]] || examples+=("$f")
done
validate_manifests "${examples[@]}"
# What tests/kind/e2e.sh applies (deploy/examples adjusted for the stage checks).
"$KUBECTL" kustomize tests/kind/manifests >"$OUT/kustomize/kind-e2e.yaml" || die "kubectl kustomize tests/kind/manifests"
validate_manifests "$OUT/kustomize/kind-e2e.yaml"
# On the node (STAGE_CLUSTER=node, Kubernetes 1.20): the same without the static native
# sidecar, and the sidecar app through the chart's helper (tests/kind/sidecar-app) rendered
# for 1.20 (the classic container) and for the default version (native).
"$KUBECTL" kustomize tests/kind/node >"$OUT/kustomize/node-e2e.yaml" || die "kubectl kustomize tests/kind/node"
validate_manifests "$OUT/kustomize/node-e2e.yaml"
rm -rf "$OUT/sidecar-app"
cp -r tests/kind/sidecar-app "$OUT/sidecar-app"
"$HELM" dependency build "$OUT/sidecar-app" >"$OUT/sidecar-app-dependency.log" 2>&1 \
  || {
    cat "$OUT/sidecar-app-dependency.log" >&2
    die "helm dependency build of tests/kind/sidecar-app"
  }
"$HELM" lint --strict --quiet "$OUT/sidecar-app" >"$OUT/lint-sidecar-app.log" 2>&1 \
  || {
    cat "$OUT/lint-sidecar-app.log" >&2
    die "helm lint --strict (tests/kind/sidecar-app)"
  }
"$HELM" template demo-app "$OUT/sidecar-app" --namespace droid-pool-demo --kube-version 1.20.2 \
  >"$OUT/kustomize/sidecar-app-classic.yaml" || die "helm template tests/kind/sidecar-app (1.20)"
"$HELM" template demo-app "$OUT/sidecar-app" --namespace droid-pool-demo \
  >"$OUT/kustomize/sidecar-app-native.yaml" || die "helm template tests/kind/sidecar-app"
validate_manifests "$OUT"/kustomize/sidecar-app-{classic,native}.yaml
"$PY" scripts/check_packaging.py restricted "$OUT"/kustomize/{deploy,examples,kind-e2e,node-e2e,sidecar-app-classic,sidecar-app-native}.yaml \
  || die "deploy/ or tests/kind/manifests breaks the restricted profile"
"$PY" scripts/check_packaging.py restricted deploy/operator/namespaced.yaml \
  || die "deploy/operator/namespaced.yaml breaks the restricted profile"
# The operator's and the poolers' NetworkPolicies, in each install without Helm.
"$PY" scripts/check_packaging.py netpol "$OUT"/kustomize/{deploy,examples,kind-e2e}.yaml \
  deploy/operator/namespaced.yaml || die "a NetworkPolicy of deploy/ or tests/kind/manifests"

# --- what the operator renders --------------------------------------------------
# `droid-pool-operator render` prints the objects the operator would write for a PoolConfig
# (no cluster needed): every PoolConfig we ship, in the chart's renders and in deploy/, is
# rendered, validated like the rest, and its pooler pods held to the restricted profile.
section "operator renders (droid-pool-operator render)"
cargo build --quiet --bin droid-pool-operator || die "cargo build --bin droid-pool-operator"
OPERATOR=$(cargo metadata --no-deps --format-version 1 --offline \
  | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/droid-pool-operator
mkdir -p "$OUT/operator"
rendered=()
for src in "$OUT"/chart/*.yaml "$OUT"/kustomize/{examples,kind-e2e}.yaml deploy/examples/*.yaml; do
  grep -q "^kind: PoolConfig" "$src" || continue
  out="$OUT/operator/$(basename "$(dirname "$src")")-$(basename "$src")"
  # The operator's default allowlist; tests/kind runs the chart with its image droid-pool:e2e,
  # which the chart's allowlist (its own image) then names.
  allow=()
  [[ $src == */kind-e2e.yaml ]] && allow=(--allowed-images droid-pool:e2e)
  "$OPERATOR" render --poolers 3 "${allow[@]}" "$src" >"$out" || die "droid-pool-operator render $src"
  grep -q "^kind: Deployment" "$out" || grep -q "^kind: ConfigMap" "$out" || die "nothing rendered for $src"
  rendered+=("$out")
done
[[ ${#rendered[@]} -gt 0 ]] || die "no PoolConfig found to render"
grep -lq "^kind: Deployment" "${rendered[@]}" || die "no rendered PoolConfig has a deployment target"
"$VENV/bin/kubernetes-validate" -k 1.29.0 --strict --quiet --no-warn "${rendered[@]}" \
  || die "kubernetes-validate rejected what the operator renders"
"$PY" scripts/check_packaging.py restricted "${rendered[@]}" \
  || die "a pod the operator renders breaks the restricted profile"
echo "check-packaging: operator renders of ${#rendered[@]} files pass the restricted profile"

# --- chaos/ -------------------------------------------------------------------
section "chaos/ manifests"
chaos_files=(chaos/block-postgres-20s.yaml chaos/block-postgres-20s-external.yaml)
"$PY" "$VALIDATE_CRS" "$CHAOS_CRD" -- "${chaos_files[@]}" >"$OUT/chaos/validate_crs.log" \
  || {
    cat "$OUT/chaos/validate_crs.log" >&2
    die "validate_crs.py rejected a NetworkChaos"
  }
[[ $(grep -c '^OK' "$OUT/chaos/validate_crs.log") -eq ${#chaos_files[@]} ]] \
  || die "not every chaos manifest was validated: $(cat "$OUT/chaos/validate_crs.log")"
"$PY" scripts/check_packaging.py chaos "${chaos_files[@]}" || die "chaos manifests"
netpol=chaos/kubernetes/block-postgres-20s-netpol.yaml
validate_manifests "$netpol"
"$PY" scripts/check_packaging.py restricted "$netpol" || die "the game day's Job breaks the restricted profile"
"$PY" scripts/check_packaging.py extract "$netpol" "$OUT/chaos" || die "extracting from $netpol"
"$VENV/bin/kubernetes-validate" -k 1.29.0 --strict --quiet --no-warn "$OUT/chaos/networkpolicy.yaml" \
  || die "the NetworkPolicy inside $netpol"
shellcheck -s sh "$OUT/chaos/run.sh" || die "shellcheck of the script inside $netpol"

# --- a real API server: RBAC, PoolConfigs, the game day's script ------------------
section "real API server (../shared/tools/kube-apiserver)"
bash scripts/check-packaging-apiserver.sh

# --- Prometheus ---------------------------------------------------------------
section "Prometheus rules and config"
cmp -s deploy/prometheus/droid-pool-rules.yaml "$CHART/files/droid-pool-rules.yaml" \
  || die "$CHART/files/droid-pool-rules.yaml differs from deploy/prometheus/droid-pool-rules.yaml"
grep -q 'kind: PrometheusRule' "$OUT/chart/monitoring-operator.yaml" \
  || die "the monitoring values render no PrometheusRule"
promtool check rules deploy/prometheus/droid-pool-rules.yaml >/dev/null || die "promtool check rules"
promtool test rules deploy/prometheus/droid-pool-rules.test.yaml || die "promtool test rules"
# Severity, summary, description, a runbook_url into docs/runbooks.md, tests firing and quiet.
"$PY" scripts/check_packaging.py alerts || die "the alerts' labels, annotations, runbooks or tests"
# Debian's promtool is built without Kubernetes service discovery: check the rest of the file
# (relabelling, rule files) with the discovery swapped for a static target.
cp deploy/prometheus/droid-pool-rules.yaml "$OUT/"
sed -e 's/kubernetes_sd_configs:/static_configs:/' -e 's/- role: pod/- targets: ["127.0.0.1:9127"]/' \
  deploy/prometheus/prometheus.yml >"$OUT/prometheus.yml"
grep -q 'role: pod' "$OUT/prometheus.yml" && die "the static swap of prometheus.yml did not apply"
promtool check config "$OUT/prometheus.yml" >/dev/null || die "promtool check config"

# --- Grafana ------------------------------------------------------------------
section "Grafana dashboard"
# namespace and poolconfig variables filtering every query; windows only $__rate_interval.
"$PY" scripts/check_packaging.py dashboard deploy/grafana/droid-pool.json || die "the Grafana dashboard"

# --- yamllint -----------------------------------------------------------------
section "yamllint"
"$VENV/bin/yamllint" --strict -c .yamllint.yaml \
  "$CHART/Chart.yaml" "$CHART/values.yaml" "$CHART/ci" deploy chaos/*.yaml chaos/kubernetes tests/kind scripts/testdata \
  tests/helm/parent-chart/Chart.yaml tests/helm/parent-chart/values.yaml \
  "$OUT/chart" "$OUT/parent" "$OUT/kustomize" "$OUT/chaos/networkpolicy.yaml" || die "yamllint"
"$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$CHART/values.schema.json" \
  || die "values.schema.json is not JSON"

# --- shell scripts ------------------------------------------------------------
section "shell scripts (bash -n, shellcheck)"
scripts=(tests/kind/*.sh chaos/gameday/run.sh chaos/gameday/switchover.sh scripts/check-packaging.sh scripts/ensure-k8s-tools.sh
  scripts/render-deploy.sh scripts/check-packaging-apiserver.sh scripts/build-pgo.sh bench/run.sh
  scripts/k8s-node.sh scripts/k8s-node/*.sh)
for s in "${scripts[@]}"; do
  bash -n "$s" || die "bash -n $s"
done
shellcheck -x "${scripts[@]}" || die "shellcheck"
"$PY" -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' \
  tests/kind/prepared_checks.py tests/kind/partition.py tests/kind/prometheus_config.py tests/kind/k8s_sd_bridge.py chaos/gameday/switchover.py scripts/check_packaging.py scripts/pod_security.py scripts/check_monitoring.py scripts/chart_pods.py scripts/netpol_check.py \
  || die "python syntax"

echo "check-packaging: all checks passed"
