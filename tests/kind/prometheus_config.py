#!/usr/bin/env python3
"""The Prometheus configuration the Prometheus Operator would generate from the chart's
PodMonitors (stage 8 of tests/kind/e2e.sh on the node, where no Prometheus Operator runs):
one job per PodMonitor endpoint, pods discovered through the API server, kept by the
PodMonitor's matchLabels and port name, its relabelings applied; and deploy/prometheus/'s
rules. Debian's prometheus is built without kubernetes_sd_configs: the pods come from
tests/kind/k8s_sd_bridge.py (http_sd_configs), which lists them through the API server with
kubernetes_sd's role-pod labels.

  prometheus_config.py RENDERED_CHART SD_URL RULES_FILE > prometheus.yml"""
import re
import sys

import yaml


def sanitize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def jobs(monitor, sd_url):
    spec = monitor["spec"]
    ns = monitor["metadata"]["namespace"]
    sel = spec.get("namespaceSelector") or {}
    sd = {"url": sd_url, "refresh_interval": "5s"}
    namespaces = [] if sel.get("any") else (sel.get("matchNames") or [ns])
    for i, ep in enumerate(spec["podMetricsEndpoints"]):
        relabel = []
        if namespaces:
            relabel.append({"source_labels": ["__meta_kubernetes_namespace"],
                            "regex": "|".join(re.escape(n) for n in namespaces), "action": "keep"})
        for k, v in (spec["selector"].get("matchLabels") or {}).items():
            relabel.append({"source_labels": [f"__meta_kubernetes_pod_label_{sanitize(k)}",
                                              f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"],
                            "regex": f"({re.escape(v)});true", "action": "keep"})
        relabel.append({"source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": ep["port"], "action": "keep"})
        relabel.append({"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)",
                        "action": "drop"})
        for src, dst in (("namespace", "namespace"), ("pod_name", "pod"), ("pod_container_name", "container")):
            relabel.append({"source_labels": [f"__meta_kubernetes_{src}"], "target_label": dst})
        for r in ep.get("relabelings") or []:
            relabel.append({"source_labels": r["sourceLabels"], "regex": r.get("regex", "(.*)"),
                            "target_label": r["targetLabel"], "action": "replace"})
        yield {"job_name": f"podMonitor/{ns}/{monitor['metadata']['name']}/{i}",
               "metrics_path": ep.get("path", "/metrics"), "scrape_interval": "5s",
               "http_sd_configs": [sd], "relabel_configs": relabel}


def main(rendered, sd_url, rules):
    with open(rendered) as f:
        monitors = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "PodMonitor"]
    if not monitors:
        sys.exit("prometheus_config: the chart rendered no PodMonitor")
    config = {"global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
              "rule_files": [rules],
              "scrape_configs": [j for m in monitors for j in jobs(m, sd_url)]}
    yaml.safe_dump(config, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
