#!/usr/bin/env bash
# A real single-node Kubernetes (1.20.2) on this Linux machine, for the stage tests
# (tests/kind/e2e.sh with STAGE_CLUSTER=node). Needs root and Debian (bookworm) packages only:
# etcd, containerd, runc and the CNI plugins from Debian's archive; kube-apiserver, kubelet,
# kube-controller-manager, kube-scheduler, kube-proxy and kubectl built from Debian's
# `kubernetes` source package (scripts/k8s-node/build.sh, cached).
#
#   scripts/k8s-node.sh up           start the node (idempotent); imports the image archives of
#                                    scripts/k8s-node/images.sh when they exist
#   scripts/k8s-node.sh load         import those archives again (after a new image build)
#   scripts/k8s-node.sh kubeconfig   print the admin kubeconfig's path
#   scripts/k8s-node.sh bin          print the directory of kubectl and the node's binaries
#   scripts/k8s-node.sh down         stop everything and undo every change, then check that the
#                                    machine is as before `up`; exit 1 naming what remains
#   scripts/k8s-node.sh check        only that check
#
# What it changes while up, all undone and checked by `down`: links dpnode0 (the node address
# 10.222.0.1, a port-less bridge: this kernel has no dummy links) and dpbr0 (the pod bridge,
# 10.244.0.0/24) with their veths; iptables chains KUBE-* (kube-proxy, kubelet), CNI-* and
# DPNODE-* (the guard below) in iptables and ip6tables; cgroups kubepods/ in each hierarchy;
# the sysctls the kubelet, kube-proxy and the bridge plugin set (values saved before, restored
# after); /var/log/pods and /var/log/containers when they did not exist. containerd and the
# kubelet run in a private mount namespace, so their mounts (overlays, netns, volumes) vanish
# with it. Everything else lives under K8S_NODE_DIR (default /tmp/droid-pool-node).
#
# Pod traffic stays on the node: DPNODE-GUARD drops forwarded traffic from the pod range that
# leaves dpbr0 and traffic into dpbr0 from anywhere else; DPNODE-INPUT admits pods to the host
# only for the API server and the cluster DNS. Services: ClusterIP through kube-proxy
# (iptables mode, 10.96.0.0/16). Cluster DNS: Debian's dnsmasq on 10.222.0.1:53 answers
# <service>.<namespace>.svc.cluster.local with the Service's ClusterIP, from a hosts file
# rewritten from the API server every second (scripts/k8s-node/dns.sh); nothing is forwarded
# upstream. CoreDNS is not in Debian; headless, pod and SRV records are not served.
set -euo pipefail
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
lib=$here/k8s-node
D=$(realpath -m "${K8S_NODE_DIR:-/tmp/droid-pool-node}")
IMAGES=$(realpath -m "${XDG_CACHE_HOME:-$HOME/.cache}/droid-pool/k8s-node/images")
P=$D/pids
L=$D/logs
R=$D/run
IP=10.222.0.1
API=26443
ETCD=22379
NODE=droid-pool-node
POD_CIDR=10.244.0.0/24
SVC_CIDR=10.96.0.0/16
# The sysctls something on the node may set: saved before `up`, restored and checked by `down`.
SYSCTLS=(net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.all.route_localnet
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait)
OURS='KUBE-|CNI-|DPNODE-'
LINKS='^(dpnode0|dpbr0)$'
log() { echo "k8s-node: $*" >&2; }
trap 'log "failed (line $LINENO): $BASH_COMMAND"' ERR
die() {
  log "$*"
  exit 1
}
alive() { [[ -f $P/$1.pid ]] && kill -0 "$(cat "$P/$1.pid")" 2>/dev/null; }
# bg NAME CMD...: start CMD in the background unless NAME runs already; log to logs/NAME.log.
bg() {
  local n=$1
  shift
  alive "$n" && return 0
  "$@" >"$L/$n.log" 2>&1 &
  echo $! >"$P/$n.pid"
}
bin_dir() { bash "$lib/build.sh" | tail -n1; }
kc() { "$BIN/kubectl" --kubeconfig "$R/admin.kubeconfig" "$@"; }
ctr_() { ctr -a "$D/containerd/containerd.sock" -n k8s.io "$@"; }

# --- the state `down` compares against --------------------------------------------------------
snapshot_sysctls() {
  local k
  for k in "${SYSCTLS[@]}"; do
    [[ -e /proc/sys/${k//.//} ]] && echo "$k=$(sysctl -n "$k")"
  done
}
ours_in_iptables() {
  local cmd t
  for cmd in iptables ip6tables; do
    for t in filter nat mangle raw; do
      "$cmd-save" -t "$t" 2>/dev/null | grep -E "$OURS|${POD_CIDR%.*}\.|10\.96\.|$IP" | sed "s/^/$cmd $t: /" || true
    done
  done
}
leftovers() {
  local f
  # processes: ours by pid file, any that names our directory, any in a kubepods cgroup
  for f in "$P"/*.pid; do
    [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && echo "process $(basename "$f" .pid) ($(cat "$f"))"
  done
  for f in /proc/[0-9]*; do
    [[ ${f#/proc/} == "$$" || ${f#/proc/} == "$BASHPID" ]] && continue
    if { tr '\0' ' ' <"$f/cmdline"; } 2>/dev/null | grep -q -- "$D/"; then
      echo "process ${f#/proc/}: $({ tr '\0' ' ' <"$f/cmdline"; } 2>/dev/null | cut -c1-120)"
    elif grep -q '/kubepods' "$f/cgroup" 2>/dev/null; then
      echo "process ${f#/proc/} in a kubepods cgroup: $(cat "$f/comm" 2>/dev/null)"
    fi
  done
  grep -E "$D|kubepods|/var/lib/kubelet" /proc/self/mountinfo | awk '{print "mount " $5}' || true
  ip -o link 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "$LINKS" | sed 's/^/link /' || true
  ip -o link show master dpbr0 2>/dev/null | awk -F': ' '{print "link " $2}' || true
  ours_in_iptables | sed 's/^/rule /'
  for f in /sys/fs/cgroup/*/kubepods; do [[ -d $f ]] && echo "cgroup $f"; done
  if [[ -f $D/sysctl.before ]]; then
    local k v
    while IFS='=' read -r k v; do
      [[ $(sysctl -n "$k" 2>/dev/null) == "$v" ]] || echo "sysctl $k=$(sysctl -n "$k" 2>/dev/null) (was $v)"
    done <"$D/sysctl.before"
  fi
  if [[ -f $D/created-dirs ]]; then
    while read -r f; do [[ -e $f ]] && echo "directory $f"; done <"$D/created-dirs"
  fi
  return 0
}
check() {
  local left
  left=$(leftovers)
  if [[ -n $left ]]; then
    log "NOT CLEAN: after down, these remain:"
    printf '  %s\n' "${left//$'\n'/$'\n'  }" >&2
    return 1
  fi
  log "check: no process, mount, link, iptables rule or chain, cgroup, sysctl or directory of the node remains"
}

# --- up ---------------------------------------------------------------------------------------
auth_material() {
  mkdir -p "$R/certs" "$R/pki"
  if [[ ! -f $R/sa.key ]]; then
    openssl genrsa -out "$R/sa.key" 2048 2>/dev/null
    openssl rsa -in "$R/sa.key" -pubout -out "$R/sa.pub" 2>/dev/null
  fi
  # A CA for the kubelet's clients: only the API server (this certificate) may use its API.
  if [[ ! -f $R/pki/ca.crt ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=droid-pool-node-ca \
      -keyout "$R/pki/ca.key" -out "$R/pki/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout "$R/pki/apiserver-kubelet.key" -out "$R/pki/apiserver-kubelet.csr" 2>/dev/null
    openssl x509 -req -in "$R/pki/apiserver-kubelet.csr" -CA "$R/pki/ca.crt" -CAkey "$R/pki/ca.key" \
      -CAcreateserial -days 30 -out "$R/pki/apiserver-kubelet.crt" 2>/dev/null
  fi
  [[ -f $R/tokens.csv ]] || {
    local u
    for u in admin kcm sched proxy node dns; do echo "$u:$(openssl rand -hex 16)"; done >"$R/tokens"
    awk -F: -v node="$NODE" '
      $1 == "admin" { print $2 ",admin,admin-uid,system:masters" }
      $1 == "kcm"   { print $2 ",system:kube-controller-manager,kcm-uid" }
      $1 == "sched" { print $2 ",system:kube-scheduler,sched-uid" }
      $1 == "proxy" { print $2 ",system:kube-proxy,proxy-uid" }
      $1 == "node"  { print $2 ",system:node:" node ",node-uid,system:nodes" }
      $1 == "dns"   { print $2 ",droid-pool-node-dns,dns-uid,system:masters" }' "$R/tokens" >"$R/tokens.csv"
    chmod 600 "$R/tokens" "$R/tokens.csv"
  }
  local name token
  while IFS=: read -r name token; do
    cat >"$R/$name.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: droid-pool-node, cluster: {server: "https://$IP:$API", insecure-skip-tls-verify: true}}]
users: [{name: $name, user: {token: $token}}]
contexts: [{name: droid-pool-node, context: {cluster: droid-pool-node, user: $name, namespace: default}}]
current-context: droid-pool-node
KC
    chmod 600 "$R/$name.kubeconfig"
  done <"$R/tokens"
}

record_dir() { # create DIR, remembering to remove it at down when it did not exist
  [[ -e $1 ]] && return 0
  mkdir -p "$1"
  echo "$1" >>"$D/created-dirs"
}

network() {
  if ! ip link show dpnode0 >/dev/null 2>&1; then
    ip link add dpnode0 type bridge
    sysctl -qw net.ipv6.conf.dpnode0.disable_ipv6=1
    ip addr add "$IP/32" dev dpnode0
    ip link set dpnode0 up
  fi
  # The pod bridge exists before the first pod so that the guard below can name it.
  if ! ip link show dpbr0 >/dev/null 2>&1; then
    ip link add dpbr0 type bridge
    sysctl -qw net.ipv6.conf.dpbr0.disable_ipv6=1
    ip link set dpbr0 up
  fi
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
  # IPv4 only: the pod network has no IPv6 (disabled on both bridges).
  iptables -N DPNODE-GUARD 2>/dev/null || true
  iptables -C FORWARD -j DPNODE-GUARD 2>/dev/null || iptables -I FORWARD 1 -j DPNODE-GUARD
  iptables -F DPNODE-GUARD
  iptables -A DPNODE-GUARD -s "$POD_CIDR" ! -o dpbr0 -j DROP
  iptables -A DPNODE-GUARD -o dpbr0 ! -i dpbr0 -j DROP
  iptables -N DPNODE-INPUT 2>/dev/null || true
  iptables -C INPUT -i dpbr0 -j DPNODE-INPUT 2>/dev/null || iptables -I INPUT 1 -i dpbr0 -j DPNODE-INPUT
  iptables -F DPNODE-INPUT
  iptables -A DPNODE-INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
  iptables -A DPNODE-INPUT -d "$IP" -p tcp --dport "$API" -j ACCEPT
  iptables -A DPNODE-INPUT -d "$IP" -p udp --dport 53 -j ACCEPT
  iptables -A DPNODE-INPUT -d "$IP" -p tcp --dport 53 -j ACCEPT
  iptables -A DPNODE-INPUT -j DROP
}

configs() {
  mkdir -p "$D/containerd" "$D/cni/net.d" "$D/cni/ipam" "$D/kubelet"
  sed "s|@D@|$D|g" "$lib/containerd.toml" >"$D/containerd/config.toml"
  sed "s|@D@|$D|g; s|@POD_CIDR@|$POD_CIDR|g; s|@GW@|${POD_CIDR%.*}.1|g" "$lib/cni.conflist" \
    >"$D/cni/net.d/10-droid-pool-node.conflist"
  : >"$D/resolv.conf"
}

control_plane() {
  bg etcd etcd --name droid-pool-node --data-dir "$R/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD" --advertise-client-urls "http://127.0.0.1:$ETCD" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD + 1))" \
    --initial-cluster "droid-pool-node=http://127.0.0.1:$((ETCD + 1))" \
    --listen-metrics-urls "http://127.0.0.1:$((ETCD + 2))"
  bg apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD" \
    --bind-address="$IP" --advertise-address="$IP" --secure-port="$API" --insecure-port=0 \
    --cert-dir="$R/certs" --token-auth-file="$R/tokens.csv" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP \
    --kubelet-client-certificate="$R/pki/apiserver-kubelet.crt" --kubelet-client-key="$R/pki/apiserver-kubelet.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$R/sa.pub" --service-account-signing-key-file="$R/sa.key" \
    --service-cluster-ip-range="$SVC_CIDR"
  local i
  for i in $(seq 1 240); do
    [[ $(curl -sk -H "Authorization: Bearer $(awk -F: '$1 == "admin" {print $2}' "$R/tokens")" \
      "https://$IP:$API/readyz" 2>/dev/null) == ok ]] && break
    alive apiserver || die "kube-apiserver exited: $(tail -5 "$L/apiserver.log")"
    sleep 0.5
  done
  [[ $i -lt 240 ]] || die "kube-apiserver not ready after 120 s: $(tail -5 "$L/apiserver.log")"
  bg kcm "$BIN/kube-controller-manager" --kubeconfig="$R/kcm.kubeconfig" --leader-elect=false \
    --port=0 --secure-port=0 --service-account-private-key-file="$R/sa.key" \
    --root-ca-file="$R/certs/apiserver.crt" --use-service-account-credentials=true \
    --cluster-cidr=10.244.0.0/16 --service-cluster-ip-range="$SVC_CIDR"
  bg scheduler "$BIN/kube-scheduler" --kubeconfig="$R/sched.kubeconfig" --leader-elect=false \
    --port=0 --secure-port=0
}

runtime() {
  # containerd and the kubelet share a private mount namespace: every mount they make
  # (snapshots, netns, volumes) vanishes with it.
  if ! alive mntns; then
    unshare --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
    echo $! >"$P/mntns.pid"
    sleep 0.5
  fi
  local ns
  ns=$(cat "$P/mntns.pid")
  [[ $(readlink "/proc/$ns/ns/mnt") != "$(readlink /proc/self/ns/mnt)" ]] || die "the mount namespace holder is not in its own namespace"
  record_dir /var/log/pods
  record_dir /var/log/containers
  bg containerd nsenter -t "$ns" -m -- containerd --config "$D/containerd/config.toml"
  local i
  for i in $(seq 1 60); do
    ctr -a "$D/containerd/containerd.sock" version >/dev/null 2>&1 && break
    sleep 0.5
  done
  ctr -a "$D/containerd/containerd.sock" version >/dev/null 2>&1 || die "containerd did not start: $(tail -5 "$L/containerd.log")"
  load_images
  # --sync-frequency: a ConfigMap change reaches its pods' volumes within about 15 s (the
  # default minute, plus jitter, is longer than a stage test should wait on it).
  bg kubelet nsenter -t "$ns" -m -- "$BIN/kubelet" --kubeconfig="$R/node.kubeconfig" \
    --hostname-override="$NODE" --node-ip="$IP" --address="$IP" \
    --root-dir="$D/kubelet" --cert-dir="$D/kubelet/pki" --volume-plugin-dir="$D/kubelet/volume-plugins" \
    --container-runtime=remote --container-runtime-endpoint="unix://$D/containerd/containerd.sock" \
    --pod-infra-container-image=localhost/pause:1.0 --cgroup-driver=cgroupfs --fail-swap-on=false \
    --anonymous-auth=false --client-ca-file="$R/pki/ca.crt" --authorization-mode=AlwaysAllow \
    --read-only-port=0 --healthz-bind-address=127.0.0.1 --healthz-port=10248 \
    --eviction-hard='memory.available<50Mi,nodefs.available<1%,imagefs.available<1%' \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --cluster-domain=cluster.local --cluster-dns="$IP" --resolv-conf="$D/resolv.conf" \
    --serialize-image-pulls=false --sync-frequency=15s
  bg proxy "$BIN/kube-proxy" --kubeconfig="$R/proxy.kubeconfig" --hostname-override="$NODE" \
    --proxy-mode=iptables --cluster-cidr=10.244.0.0/16 --bind-address="$IP" \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
}

load_images() {
  local f
  for f in "$IMAGES"/*.tar; do
    [[ -f $f ]] || continue
    ctr_ images import --all-platforms "$f" >/dev/null || die "importing $f into the node failed"
  done
}

dns() {
  bg dns bash "$lib/dns.sh" "$D" "$BIN/kubectl" "$R/dns.kubeconfig" "$IP"
}

up() {
  mkdir -p "$D" "$P" "$L" "$R"
  if ! alive apiserver; then
    # A first `up` (or one after `down`): the machine must be clean, and that is what `down`
    # will be held to.
    local left
    left=$(leftovers)
    [[ -z $left ]] || die "the machine already holds node parts (run down first):"$'\n'"$left"
    snapshot_sysctls >"$D/sysctl.before"
  fi
  bash "$lib/deps.sh" run >&2
  BIN=$(bin_dir)
  auth_material
  configs
  network
  control_plane
  runtime
  dns
  local i
  for i in $(seq 1 240); do
    kc get node "$NODE" 2>/dev/null | grep -qw Ready && break
    alive kubelet || die "the kubelet exited: $(tail -5 "$L/kubelet.log")"
    sleep 0.5
  done
  kc get node "$NODE" 2>/dev/null | grep -qw Ready || die "node not Ready after 120 s: $(tail -5 "$L/kubelet.log")"
  log "node $NODE Ready after ${SECONDS}s (kubeconfig $R/admin.kubeconfig)"
}

# --- down -------------------------------------------------------------------------------------
stop() {
  local f=$P/$1.pid p i
  [[ -f $f ]] || return 0
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then
    kill "$p" 2>/dev/null || true
    for i in $(seq 1 40); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.25
    done
    kill -9 "$p" 2>/dev/null || true
  fi
  rm -f "$f"
}

kill_pods() {
  local f p
  # Whatever still runs in a pod's cgroup (ours alone are under kubepods/).
  for f in /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods; do
    [[ -d $f ]] || continue
    find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do kill -9 "$p" 2>/dev/null || true; done
  done
}

down() {
  BIN=$(bin_dir)
  local t c s
  # Nothing new is scheduled or replaced from here on.
  stop kcm
  stop scheduler
  if alive kubelet && alive apiserver; then
    # Pods first, gracefully, while the kubelet still runs them.
    timeout 60 "$BIN/kubectl" --kubeconfig "$R/admin.kubeconfig" delete pod --all --all-namespaces \
      --grace-period=2 --wait=true >/dev/null 2>&1 || true
  fi
  stop dns
  [[ -f $D/dns/dnsmasq.pid ]] && kill "$(cat "$D/dns/dnsmasq.pid")" 2>/dev/null
  stop prometheus
  stop sd-bridge
  stop proxy
  stop kubelet
  if [[ -S $D/containerd/containerd.sock ]]; then
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$t" >/dev/null 2>&1 || true; done
    for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$c" >/dev/null 2>&1 || true; done
  fi
  stop containerd
  kill_pods
  # containerd's shims (they name our socket's directory on their command line).
  for s in /proc/[0-9]*; do
    case "$(cat "$s/comm" 2>/dev/null)" in
      containerd-shim*) tr '\0' ' ' <"$s/cmdline" 2>/dev/null | grep -q -- "$D/" && kill -9 "${s#/proc/}" 2>/dev/null ;;
    esac
  done
  stop apiserver
  stop etcd
  stop mntns
  sleep 0.5
  ip link del dpbr0 2>/dev/null || true
  ip link del dpnode0 2>/dev/null || true
  unchain
  for c in /sys/fs/cgroup/*/kubepods; do
    [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  if [[ -f $D/sysctl.before ]]; then
    while IFS='=' read -r t c; do sysctl -qw "$t=$c" 2>/dev/null || true; done <"$D/sysctl.before"
  fi
  if [[ -f $D/created-dirs ]]; then
    sort -u "$D/created-dirs" | while read -r t; do rm -rf "$t"; done
  fi
  if check; then
    rm -rf "$D"
    log "down: the machine is as before up"
  else
    return 1
  fi
}

# Deletes the jumps into our chains, then the chains, in every table of both families.
unchain() {
  local cmd t r ch
  for cmd in iptables ip6tables; do
    for t in filter nat mangle raw; do
      { "$cmd-save" -t "$t" 2>/dev/null | grep -E "^-A [^ ]+ .*-j ($OURS)" | grep -vE "^-A ($OURS)" || true; } \
        | sed 's/^-A/-D/' | while read -r r; do eval "$cmd -t $t $r" 2>/dev/null || true; done
      for ch in $("$cmd-save" -t "$t" 2>/dev/null | grep -oE "^:($OURS)[^ ]+" | tr -d :); do "$cmd" -t "$t" -F "$ch" 2>/dev/null || true; done
      for ch in $("$cmd-save" -t "$t" 2>/dev/null | grep -oE "^:($OURS)[^ ]+" | tr -d :); do "$cmd" -t "$t" -X "$ch" 2>/dev/null || true; done
    done
  done
}

[[ $(id -u) == 0 ]] || die "needs root (network links, iptables, cgroups, mount namespaces)"
case ${1:-} in
  up) up ;;
  down) down ;;
  check) check ;;
  load)
    BIN=$(bin_dir)
    load_images
    ;;
  kubeconfig) echo "$R/admin.kubeconfig" ;;
  bin) bin_dir ;;
  *)
    echo "usage: $0 up|down|kubeconfig|bin|load|check" >&2
    exit 2
    ;;
esac
