#!/usr/bin/env python3
"""Kubernetes pod discovery for a Prometheus built without kubernetes_sd_configs (Debian's
prometheus package leaves it out): an HTTP service-discovery endpoint (http_sd_configs) that
lists the pods through the API server on every refresh and gives each declared container
port the target and the __meta_kubernetes_pod_* labels kubernetes_sd_configs' role "pod"
gives it, so that the same relabelling (the chart's PodMonitors') selects the same targets.

  k8s_sd_bridge.py KUBECONFIG PORT     serves GET /pods on 127.0.0.1:PORT"""
import http.server
import json
import re
import ssl
import sys
import urllib.request

import yaml


def sanitize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def load(kubeconfig):
    with open(kubeconfig) as f:
        kc = yaml.safe_load(f)
    cluster = kc["clusters"][0]["cluster"]
    ctx = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return cluster["server"], kc["users"][0]["user"]["token"], ctx


def groups(server, token, ctx):
    req = urllib.request.Request(server + "/api/v1/pods", headers={"Authorization": f"Bearer {token}"})
    pods = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["items"]
    out = []
    for p in pods:
        meta, spec, status = p["metadata"], p["spec"], p.get("status", {})
        ip = status.get("podIP")
        if not ip:
            continue
        common = {"__meta_kubernetes_namespace": meta["namespace"],
                  "__meta_kubernetes_pod_name": meta["name"],
                  "__meta_kubernetes_pod_ip": ip,
                  "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
                  "__meta_kubernetes_pod_phase": status.get("phase", ""),
                  "__meta_kubernetes_pod_ready": str(any(c["type"] == "Ready" and c["status"] == "True"
                                                         for c in status.get("conditions", []))).lower()}
        for k, v in (meta.get("labels") or {}).items():
            common[f"__meta_kubernetes_pod_label_{sanitize(k)}"] = v
            common[f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"] = "true"
        for k, v in (meta.get("annotations") or {}).items():
            common[f"__meta_kubernetes_pod_annotation_{sanitize(k)}"] = v
            common[f"__meta_kubernetes_pod_annotationpresent_{sanitize(k)}"] = "true"
        for init, containers in ((False, spec.get("containers", [])), (True, spec.get("initContainers", []))):
            for c in containers:
                for port in c.get("ports", []):
                    labels = dict(common)
                    labels.update({"__meta_kubernetes_pod_container_name": c["name"],
                                   "__meta_kubernetes_pod_container_init": str(init).lower(),
                                   "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                                   "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                                   "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP")})
                    out.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return out


def main(kubeconfig, port):
    server, token, ctx = load(kubeconfig)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            try:
                body = json.dumps(groups(server, token, ctx)).encode()
                code = 200
            except Exception as e:  # the API server's answer, passed on as an error
                body, code = str(e).encode(), 502
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
