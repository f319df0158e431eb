"""Checks of the alert rules and the Grafana dashboard (used by check_packaging.py alerts and
dashboard). Each function returns failure messages."""
import json
import re

import yaml

SEVERITIES = {"critical", "warning", "info"}
# Range selectors in a dashboard: only Grafana's $__rate_interval, which follows the scrape
# interval and the zoom, where a fixed window is too short for a slow scrape or too long to see.
RANGE = re.compile(r"\[([^\]]*)\]")
# A filter on one template variable, e.g. namespace=~"$namespace".
FILTER = 'VAR=~"$VAR"'


def github_anchor(heading):
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def alerts(rules_path, tests_path, runbooks_path, home):
    """Every alert: a severity, a summary, a description, and a runbook_url that points at an
    existing section of runbooks_path in the repository at home; a promtool test that sees it
    fire and one that sees it quiet; no runbook section for an alert that does not exist."""
    out = []
    with open(rules_path) as f:
        rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"] if "alert" in r]
    with open(runbooks_path) as f:
        anchors = {github_anchor(l.lstrip("#")) for l in f if l.startswith("#")}
    base = f"{home.rstrip('/')}/blob/main/{runbooks_path}#"
    names = set()
    for r in rules:
        name, ann = r["alert"], r.get("annotations") or {}
        names.add(name)
        if (r.get("labels") or {}).get("severity") not in SEVERITIES:
            out.append(f"{rules_path}: {name}: severity label not one of {sorted(SEVERITIES)}")
        for key in ("summary", "description"):
            if not ann.get(key):
                out.append(f"{rules_path}: {name}: no {key} annotation")
        url = ann.get("runbook_url", "")
        if not url.startswith(base) or url[len(base):] not in anchors:
            out.append(f"{rules_path}: {name}: runbook_url {url!r} is not {base}<a section of {runbooks_path}>")
        elif url[len(base):] != github_anchor(name):
            out.append(f"{rules_path}: {name}: runbook_url points at another alert's section")
    for a in anchors:
        if a.startswith("droidpool") and a not in {github_anchor(n) for n in names}:
            out.append(f"{runbooks_path}: section #{a} is for no alert of {rules_path}")
    with open(tests_path) as f:
        tests = yaml.safe_load(f)["tests"]
    seen = {}
    for t in tests:
        for case in t.get("alert_rule_test") or []:
            seen.setdefault(case["alertname"], set()).add("fires" if case.get("exp_alerts") else "quiet")
    for name in sorted(names):
        missing = {"fires", "quiet"} - seen.get(name, set())
        if missing:
            out.append(f"{tests_path}: {name}: no test where it {' or '.join(sorted(missing))}")
    return out


def dashboard(path, variables=("namespace", "poolconfig")):
    """Template variables for each of variables (label_values queries), every query filtered by
    all of them, and no fixed range window in any query."""
    out = []
    with open(path) as f:
        d = json.load(f)
    templating = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
    for var in variables:
        v = templating.get(var)
        if not v or v.get("type") != "query" or f", {var})" not in str(v.get("query", "")) \
                or not str(v.get("query")).startswith("label_values("):
            out.append(f"{path}: no query variable {var} from label_values(..., {var})")
    exprs = [(p.get("title"), t["expr"]) for p in d.get("panels", []) for t in p.get("targets", [])]
    exprs += [(f"variable {n}", str(v.get("query"))) for n, v in templating.items() if v.get("type") == "query"]
    if not any(t for t, _ in exprs):
        out.append(f"{path}: no panel queries")
    for title, expr in exprs:
        for window in RANGE.findall(expr):
            if window != "$__rate_interval":
                out.append(f"{path}: {title}: range [{window}], want [$__rate_interval]: {expr}")
        if title.startswith("variable "):
            continue
        for var in variables:
            if FILTER.replace("VAR", var) not in expr:
                out.append(f"{path}: {title}: not filtered by {FILTER.replace('VAR', var)}: {expr}")
    return out
