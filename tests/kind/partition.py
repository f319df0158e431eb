#!/usr/bin/env python3
"""A Chaos Mesh NetworkChaos partition applied as chaos-daemon applies it, where Chaos Mesh
itself cannot be installed (the node of tests/kind/e2e.sh): iptables DROP rules inside the pods'
own network namespaces. For direction "to" (and "both"), the selected pods drop what they send
to the target pods (OUTPUT), and the target pods drop what arrives from the selected pods
(INPUT), so traffic through a Service's ClusterIP (DNATed on the node, source kept) is cut too.
chaos-daemon matches an ipset of the peers' addresses; here one rule per address does the same.

  partition.py apply MANIFEST STATE   prints the partition's duration in seconds
  partition.py heal STATE             removes every rule apply made

Environment: KUBECTL (a kubectl with the cluster's kubeconfig), CTR (ctr -a SOCKET -n k8s.io).
Needs root (nsenter). Refuses anything but action: partition."""
import json
import os
import re
import shlex
import subprocess
import sys

import yaml

CHAIN = {"OUTPUT": "DROID-CHAOS-OUT", "INPUT": "DROID-CHAOS-IN"}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def pods(selector):
    """(name, ip, pid) of every running pod the Chaos Mesh selector picks."""
    labels = ",".join(f"{k}={v}" for k, v in (selector.get("labelSelectors") or {}).items())
    tasks = {}
    for line in run(shlex.split(os.environ["CTR"]) + ["tasks", "ls"]).splitlines()[1:]:
        f = line.split()
        if len(f) >= 3 and f[2] == "RUNNING":
            tasks[f[0]] = int(f[1])
    found = []
    for ns in selector.get("namespaces") or ["default"]:
        cmd = shlex.split(os.environ["KUBECTL"]) + ["-n", ns, "get", "pods", "-o", "json"]
        if labels:
            cmd += ["-l", labels]
        for p in json.loads(run(cmd))["items"]:
            if p["status"].get("phase") != "Running" or p["metadata"].get("deletionTimestamp"):
                continue
            ids = [re.sub(r"^\w+://", "", c.get("containerID", "")) for c in p["status"].get("containerStatuses", [])]
            pid = next((tasks[i] for i in ids if i in tasks), None)
            if pid is None:
                sys.exit(f"partition: no running task for pod {ns}/{p['metadata']['name']}")
            found.append((f"{ns}/{p['metadata']['name']}", p["status"]["podIP"], pid))
    return found


def ipt(pid, *args):
    return subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-w", *args],
                          capture_output=True, text=True)


def drop(pid, hook, flag, peers):
    chain = CHAIN[hook]
    ipt(pid, "-N", chain)
    if ipt(pid, "-C", hook, "-j", chain).returncode != 0:
        r = ipt(pid, "-I", hook, "1", "-j", chain)
        if r.returncode != 0:
            sys.exit(f"partition: iptables in the netns of pid {pid}: {r.stderr}")
    for ip in peers:
        r = ipt(pid, "-A", chain, flag, f"{ip}/32", "-j", "DROP")
        if r.returncode != 0:
            sys.exit(f"partition: iptables in the netns of pid {pid}: {r.stderr}")


def seconds(duration):
    m = re.fullmatch(r"(\d+)s", str(duration))
    if not m:
        sys.exit(f"partition: duration {duration!r} is not of the form Ns")
    return int(m.group(1))


def apply(manifest, state):
    with open(manifest) as f:
        chaos = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "NetworkChaos")
    spec = chaos["spec"]
    if spec.get("action") != "partition":
        sys.exit(f"partition: action {spec.get('action')!r}, only partition is applied here")
    direction = spec.get("direction", "to")
    sources, targets = pods(spec["selector"]), pods(spec["target"]["selector"])
    if not sources or not targets:
        sys.exit(f"partition: selected {len(sources)} pods and {len(targets)} targets")
    touched = []
    if direction in ("to", "both"):
        for _, _, pid in sources:
            drop(pid, "OUTPUT", "-d", [ip for _, ip, _ in targets])
            touched.append((pid, "OUTPUT"))
        for _, _, pid in targets:
            drop(pid, "INPUT", "-s", [ip for _, ip, _ in sources])
            touched.append((pid, "INPUT"))
    if direction in ("from", "both"):
        for _, _, pid in sources:
            drop(pid, "INPUT", "-s", [ip for _, ip, _ in targets])
            touched.append((pid, "INPUT"))
        for _, _, pid in targets:
            drop(pid, "OUTPUT", "-d", [ip for _, ip, _ in sources])
            touched.append((pid, "OUTPUT"))
    with open(state, "w") as f:
        json.dump({"touched": touched, "sources": sources, "targets": targets}, f)
    print(seconds(spec.get("duration", "0s")))
    print(f"partition: {direction}: {[s[0] for s in sources]} -/-> {[t[0] for t in targets]}", file=sys.stderr)


def heal(state):
    with open(state) as f:
        touched = json.load(f)["touched"]
    for pid, hook in touched:
        chain = CHAIN[hook]
        ipt(pid, "-D", hook, "-j", chain)
        ipt(pid, "-F", chain)
        ipt(pid, "-X", chain)
    os.unlink(state)


if __name__ == "__main__":
    if sys.argv[1] == "apply":
        apply(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "heal":
        heal(sys.argv[2])
    else:
        sys.exit(__doc__)
