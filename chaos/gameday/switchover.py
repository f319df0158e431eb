#!/usr/bin/env python3
"""The switchover game day's collector and report (run by switchover.sh); the load is
gameday.py's, writing.

  collect  once a second, from each server over its unix socket (no pooler in the way): the
           gameday statements it completed (pg_stat_statements) and whether it is in recovery.
  report   per target: time from the promotion to the first successful write, the errors each
           client kind saw (those cut by the stop apart), the load on the new primary, the
           criteria, a chart, JSON, and the switchover section of chaos/README.md.

Times are Unix epoch seconds, shared by every process on the machine.
"""

import argparse
import asyncio
import json
import math
import os
import sys
from collections import defaultdict
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gameday as gd  # noqa: E402 - the load generator's helpers and codes

TARGET_TITLE = {
    "droid-pool": "droid-pool, no hold",
    "droid-pool-hold": "droid-pool, failover.hold_timeout 10s",
    "pgbouncer": "PgBouncer 1.18, host list",
}


async def collect(a):
    import asyncpg

    socks = a.socks.split(",")
    rec = {"socks": socks, "samples": []}
    conns = [None] * len(socks)
    await gd.sleep_until(a.start)
    while gd.now() < a.end:
        t = gd.now()
        row = [round(t, 3)]
        for i, sock in enumerate(socks):
            calls, recovery = None, None
            try:
                if conns[i] is None or conns[i].is_closed():
                    conns[i] = await asyncpg.connect(host=sock, port=a.port, user="postgres",
                                                     database="gameday", timeout=0.5)
                calls = await conns[i].fetchval(
                    "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements "
                    "WHERE query LIKE '%pg_sleep%gameday%'", timeout=0.5)
                recovery = await conns[i].fetchval("SELECT pg_is_in_recovery()", timeout=0.5)
            except Exception:  # noqa: BLE001 - a stopped server: no sample
                if conns[i] is not None:
                    conns[i].terminate()
                conns[i] = None
            row += [calls, recovery]
        rec["samples"].append(row)
        await gd.sleep_until(t + 1.0)
    with open(a.out, "w") as f:
        json.dump(rec, f, separators=(",", ":"))
    os._exit(0)


def rates(samples, node):
    """Statements/s a node completed, per second of the run, from successive samples."""
    out, prev = {}, None
    for row in samples:
        t, calls = row[0], row[1 + 2 * node]
        if calls is None:
            prev = None
            continue
        if prev is not None and t > prev[0]:
            out[t] = max(0, calls - prev[1]) / (t - prev[0])
        prev = (t, calls)
    return out


def analyze(d, ev):
    # The stop begins when pg_ctl stop is called: from then on the primary refuses logins and
    # ends its sessions (pg_ctl returns once it is down).
    stopped, promoting, promoted, end = ev["stopping"], ev["promoting"], ev["promoted"], ev["end"]
    base_from = stopped - ev["baseline_s"]
    attempts = []
    for kind in ("naive", "good"):
        r = gd.load_json(os.path.join(d, f"{kind}.json"), {"attempts": []})
        attempts += [(t0, dur, code, kind) for t0, dur, code, *_ in r["attempts"]]
    col = gd.load_json(os.path.join(d, "collect.json"), {"samples": []})
    ok_ends = sorted(t0 + dur for t0, dur, code, _k in attempts if code == gd.OK)

    def successes(a, b):
        return sum(1 for x in ok_ends if a <= x < b)

    base_success = successes(base_from, stopped) / ev["baseline_s"]
    first = next((x for x in ok_ends if x > promoting), None)
    # No write may succeed while there is no primary (the old one down, none promoted yet).
    no_primary = successes(ev["stopped"], promoting)
    recovery = None
    t = promoted
    while t < end - 1:
        if successes(t, t + 1) >= 0.9 * base_success:
            recovery = max(0.0, t + 1 - promoted)
            break
        t += 0.1
    # Errors each client kind saw: during the stop (running or begun while the old primary
    # shut down: PostgreSQL ends its sessions, 57P01, whatever the pooler does), begun after
    # it was down, and before the stop (the baseline).
    down = ev["stopped"]
    errors = {k: {"cut_by_stop": defaultdict(int), "after_stop": defaultdict(int),
                  "baseline": defaultdict(int)} for k in ("naive", "good")}
    for t0, dur, code, kind in attempts:
        if code == gd.OK or t0 < base_from:
            continue
        when = ("after_stop" if t0 >= down else
                "cut_by_stop" if t0 + dur >= stopped else "baseline")
        errors[kind][when][code] += 1
    after_codes = defaultdict(int)
    for k in errors:
        for code, n in errors[k]["after_stop"].items():
            after_codes[code] += n
    read_only = sum(n for k in errors for w in errors[k].values() for c, n in w.items()
                    if c == "25006")
    base_q = [q for t, q in rates(col["samples"], 0).items() if base_from <= t < stopped]
    new_q = [q for t, q in rates(col["samples"], 1).items() if promoting <= t < promoting + 10]
    logins_new = [t for t, _o in gd.pg_logins(os.path.join(d, "postgres1.log"), ev["client_host"])]
    logins_after = sum(1 for t in logins_new if promoting <= t < promoting + 10)
    logins_between = sum(1 for t in logins_new if stopped <= t < promoting)
    droid = ev["target"].startswith("droid-pool")
    held = ev.get("hold_s", 0) > 0
    allowed = set() if held else {"57P03"}
    # Held, not even a client caught in the stop hears 57P03 from the pooler.
    refused_in_stop = sum(e["cut_by_stop"].get("57P03", 0) for e in errors.values())
    crit = {
        "first_write_s": {
            "value": None if first is None else round(first - promoted, 3),
            "limit": 2.0,
            "pass": first is not None and first - promoted <= 2.0,
        },
        "recovery_s": {
            "value": None if recovery is None else round(recovery, 1),
            "limit": 5.0,
            "pass": recovery is not None and recovery <= 5.0,
            "baseline_success_per_s": round(base_success, 1),
        },
        "errors_after_stop": {
            "value": dict(sorted(after_codes.items())),
            "allowed": sorted(allowed),
            "pass": all(c in allowed for c in after_codes) and not (held and refused_in_stop),
        },
        "read_only_errors": {"value": read_only, "limit": 0, "pass": read_only == 0},
        "writes_without_primary": {"value": no_primary, "limit": 0, "pass": no_primary == 0},
        "logins_new_primary_10s": {
            "value": logins_after,
            "limit": round(ev["pool_size"] * 1.1, 1),
            "pass": logins_after <= ev["pool_size"] * 1.1,
            "before_promotion": logins_between,
        },
        "peak_qps_new_primary": {
            "value": round(max(new_q), 1) if new_q else None,
            "baseline": round(sum(base_q) / len(base_q), 1) if base_q else None,
            "pass": None,
        },
    }
    if not droid:
        for c in crit.values():
            c["pass"] = None
    return {
        "target": ev["target"],
        "events": ev,
        "criteria": crit,
        "pass": all(c["pass"] for c in crit.values() if c["pass"] is not None),
        "errors_by_kind": {k: {w: dict(v) for w, v in e.items()} for k, e in errors.items()},
        "series": series(attempts, col, stopped, base_from, end),
        "promotion_s": round(promoted - promoting, 3),
    }


def series(attempts, col, stopped, base_from, end):
    secs = list(range(math.floor(base_from - stopped), math.ceil(end - stopped)))
    succ, fails = defaultdict(int), defaultdict(lambda: defaultdict(int))
    for t0, dur, code, _k in attempts:
        s = math.floor(t0 + dur - stopped)
        if code == gd.OK:
            succ[s] += 1
        else:
            fails[s][code] += 1
    q = [{math.floor(t - stopped): v for t, v in rates(col["samples"], n).items()} for n in (0, 1)]
    return {
        "t": secs,
        "success": [succ[s] for s in secs],
        "failures": {c: [fails[s].get(c, 0) for s in secs]
                     for c in sorted({c for s in fails for c in fails[s]})},
        "qps": [[qn.get(s) for s in secs] for qn in q],
    }


def chart(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(runs), figsize=(6 * len(runs), 7), sharex=True, squeeze=False)
    for col, r in enumerate(runs):
        s, ev = r["series"], r["events"]
        t = s["t"]
        ax = axes[0][col]
        bottom = [0] * len(t)
        for code, vals in s["failures"].items():
            ax.bar(t, vals, bottom=bottom, width=1.0, align="edge", alpha=0.6,
                   color=gd.CODE_COLORS.get(code),
                   label=f"failed {gd.CODE_LABELS.get(code, code)}")
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.step(t, s["success"], where="post", color="tab:green", lw=2, label="writes succeeded")
        verdict = "" if not r["target"].startswith("droid") else (" - PASS" if r["pass"] else " - FAIL")
        ax.set_title(TARGET_TITLE.get(r["target"], r["target"]) + verdict)
        ax.set_ylabel("client writes / s")
        ax.legend(fontsize=7, loc="upper right")
        ax = axes[1][col]
        for n, color in ((0, "tab:blue"), (1, "tab:red")):
            v = [x if x is not None else float("nan") for x in s["qps"][n]]
            ax.step(t, v, where="post", color=color, label=f"writes/s at node {n}")
        ax.set_ylabel("PostgreSQL")
        ax.set_xlabel("seconds since the primary stopped")
        ax.legend(fontsize=7, loc="upper right")
        for row in axes:
            row[col].axvline(0, color="black", ls=":", lw=1)
            row[col].axvline(ev["promoted"] - ev["stopping"], color="tab:green", ls=":", lw=1)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def cell(key, c):
    v = c.get("value")
    if key == "errors_after_stop":
        text = ", ".join(f"{k}: {n}" for k, n in v.items()) or "none"
    elif v is None:
        text = "-"
    elif key == "first_write_s":
        text = f"{v} s" if v >= 0 else f"{v} s (before pg_ctl promote returned)"
    elif key == "recovery_s":
        text = f"{v} s (base {c['baseline_success_per_s']}/s)"
    elif key == "logins_new_primary_10s":
        text = f"{v} ({c['before_promotion']} while it was a standby)"
    elif key == "peak_qps_new_primary":
        text = f"{v} (old primary before: {c['baseline']})"
    else:
        text = str(v)
    return text + gd.mark(c.get("pass"))


CRIT_TITLE = {
    "first_write_s": "first successful write after the promotion completed (≤ 2 s)",
    "recovery_s": "writes at ≥ 90 % of baseline after the promotion (≤ 5 s)",
    "errors_after_stop": "client errors, attempts begun after the primary was down (hold: none; no hold: 57P03 only)",
    "read_only_errors": "25006 read-only errors, whole run (0)",
    "writes_without_primary": "writes that succeeded with no primary, between the stop and the promotion (0)",
    "logins_new_primary_10s": "server logins at the new primary, first 10 s from the promotion (≤ pool size + 10 %)",
    "peak_qps_new_primary": "peak writes/s at the new primary, first 10 s (shown)",
}


def table(runs):
    names = [r["target"] for r in runs]
    lines = ["| criterion | " + " | ".join(TARGET_TITLE.get(n, n) for n in names) + " |",
             "|---|" + "---|" * len(runs)]
    for key, title in CRIT_TITLE.items():
        lines.append(f"| {title} | " + " | ".join(cell(key, r["criteria"][key]) for r in runs) + " |")
    for kind in ("naive", "good"):
        for when, what in (("cut_by_stop", "during the stop (the old primary ending its sessions)"),
                           ("after_stop", "begun after the primary was down"),
                           ("baseline", "before the stop")):
            cells = []
            for r in runs:
                e = r["errors_by_kind"][kind][when]
                cells.append(", ".join(f"{c}: {n}" for c, n in sorted(e.items())) or "none")
            lines.append(f"| {kind} clients' failed attempts, {what} | " + " | ".join(cells) + " |")
    lines.append("| verdict | " + " | ".join(
        ("**PASS**" if r["pass"] else "**FAIL**") if r["target"].startswith("droid") else "shown"
        for r in runs) + " |")
    return "\n".join(lines)


def report(a):
    runs = []
    for name in ("droid-pool", "droid-pool-hold", "pgbouncer"):
        d = os.path.join(a.dir, name)
        ev = gd.load_json(os.path.join(d, "events.json"), None)
        if ev is not None:
            runs.append(analyze(d, ev))
    if not runs:
        print("no runs found in", a.dir)
        return 2
    with open(os.path.join(a.dir, "results.json"), "w") as f:
        json.dump({"generated": datetime.now(timezone.utc).isoformat(), "runs": runs}, f, indent=1)
    png = os.path.join(a.dir, "gameday-switchover.png")
    chart(runs, png)
    md = table(runs)
    with open(os.path.join(a.dir, "results.md"), "w") as f:
        f.write(md + "\n")
    print(md + "\n")
    code = 0
    for r in runs:
        failed = [k for k, c in r["criteria"].items() if c["pass"] is False]
        verdict = ("PASS" if r["pass"] else "FAIL") if r["target"].startswith("droid") else "SHOWN"
        print(f"{verdict}  {r['target']:16s}" + (f"  failed: {', '.join(failed)}" if failed else ""))
        if r["target"].startswith("droid") and not r["pass"]:
            code = 1
    if a.readme:
        publish(a, runs, md, png)
    return code


def publish(a, runs, md, png):
    import shutil

    latest = os.path.join(os.path.dirname(a.readme), "gameday", "latest")
    os.makedirs(latest, exist_ok=True)
    shutil.copy(png, latest)
    shutil.copy(os.path.join(a.dir, "results.json"), os.path.join(latest, "switchover.json"))
    ev = runs[0]["events"]
    rel = os.path.relpath(latest, os.path.dirname(a.readme))
    body = [
        "<!-- switchover:results:start (written by chaos/gameday/switchover.sh; do not edit) -->",
        f"Latest run: {datetime.fromtimestamp(ev['t0'], timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, "
        f"{'short (--short)' if ev.get('short') else 'full'}: baseline {ev['baseline_s']} s, "
        f"promotion {ev['gap_s']} s after the stop, observed {ev['after_s']} s after the stop; "
        f"droid-pool {ev.get('version', '?')}, {ev.get('pgbouncer_version', 'PgBouncer')}.",
        "",
        md,
        "",
        f"![switchover]({rel}/{os.path.basename(png)})",
        "<!-- switchover:results:end -->",
    ]
    text = open(a.readme).read()
    start = text.index("<!-- switchover:results:start")
    stop = text.index("<!-- switchover:results:end -->") + len("<!-- switchover:results:end -->")
    with open(a.readme, "w") as f:
        f.write(text[:start] + "\n".join(body) + text[stop:])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    cp = sub.add_parser("collect")
    cp.add_argument("--socks", required=True, help="each server's unix socket dir, node order")
    cp.add_argument("--port", type=int, default=5432)
    cp.add_argument("--start", type=float, required=True)
    cp.add_argument("--end", type=float, required=True)
    cp.add_argument("--out", required=True)
    rp = sub.add_parser("report")
    rp.add_argument("--dir", required=True)
    rp.add_argument("--readme", help="chaos/README.md to update (and chaos/gameday/latest/)")
    a = p.parse_args()
    if a.cmd == "collect":
        asyncio.run(collect(a))
    else:
        sys.exit(report(a))


if __name__ == "__main__":
    main()
