#!/usr/bin/env bash
# The node's cluster DNS: Debian's dnsmasq answers <service>.<namespace>.svc.cluster.local
# (and <service>.<namespace>.svc) with the Service's ClusterIP from a hosts file this loop
# rewrites from the API server every second; names under cluster.local it does not know get
# NXDOMAIN; nothing is forwarded upstream (pods reach nothing beyond the node).
#   dns.sh STATE_DIR KUBECTL KUBECONFIG LISTEN_IP     (scripts/k8s-node.sh starts and stops it)
set -uo pipefail
dir=$1/dns
kubectl=$2
kubeconfig=$3
ip=$4
mkdir -p "$dir"
: >"$dir/hosts"
dnsmasq --keep-in-foreground --no-resolv --no-hosts --no-poll --bind-interfaces --listen-address="$ip" \
  --port=53 --addn-hosts="$dir/hosts" --local=/cluster.local/ --domain-needed --log-facility=- \
  --pid-file="$dir/dnsmasq.pid" --user=root &
dnsmasq=$!
trap 'kill $dnsmasq 2>/dev/null; exit 0' TERM INT
while kill -0 "$dnsmasq" 2>/dev/null; do
  if "$kubectl" --kubeconfig "$kubeconfig" get svc --all-namespaces --request-timeout=5s \
    -o jsonpath='{range .items[*]}{.spec.clusterIP} {.metadata.name}.{.metadata.namespace}.svc.cluster.local {.metadata.name}.{.metadata.namespace}.svc{"\n"}{end}' \
    2>/dev/null | grep -v '^None ' | grep -v '^ ' >"$dir/hosts.new"; then
    if ! cmp -s "$dir/hosts.new" "$dir/hosts"; then
      mv "$dir/hosts.new" "$dir/hosts"
      kill -HUP "$dnsmasq" 2>/dev/null
    fi
  fi
  sleep 1 &
  wait $! 2>/dev/null
done
