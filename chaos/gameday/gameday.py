#!/usr/bin/env python3
"""The game day of issue 5: load generator, collector and report (run by run.sh).

Subcommands (each a separate process, so a busy load generator cannot delay the others):

  load     open-loop load through the pooler: "naive" clients (retry at once, up to 27
           attempts: the postmortem's 3 x 3 x 3) or "good" clients (3 attempts, full-jitter
           backoff, one deadline). Every action and every attempt is recorded.
  collect  once a second: pg_stat_statements calls (over PostgreSQL's unix socket, which no
           network fault touches), the pooler's waiting clients, breaker state and retry
           overflow; /livez four times a second; and a probe query every 50 ms whose answers
           time the pooler's refusals.
  report   merges the runs: per-second series, the issue's pass criteria, JSON, PNG charts,
           and the results section of chaos/README.md.

Times are Unix epoch seconds (time.time()); every process on the machine shares that clock.
"""

import argparse
import asyncio
import bisect
import json
import math
import os
import random
import re
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone

# Each request holds a server connection for 100 ms: the pool of 4 serves about 40/s.
SQL = "SELECT pg_sleep(0.1) /* gameday */"
NAIVE_ATTEMPTS = 27
NAIVE_TIMEOUT = 2.0
GOOD_ATTEMPTS = 3
GOOD_DEADLINE = 3.0
GOOD_BASE = 0.1
GOOD_CAP = 1.0
CONNECT_TIMEOUT = 2.0

OK = "00000"
TIMEOUT = "timeout"  # the client's own timeout fired
CONN = "conn"  # connection broke or could not be made, with no SQLSTATE


def now():
    return time.time()


async def sleep_until(t):
    d = t - now()
    if d > 0:
        await asyncio.sleep(d)


# ---------------------------------------------------------------------------------------------
# load
# ---------------------------------------------------------------------------------------------


class Slot:
    """One client connection; an action holds it for all its attempts."""

    def __init__(self):
        self.conn = None

    def drop(self):
        if self.conn is not None:
            self.conn.terminate()
            self.conn = None


async def one_attempt(a, slot, timeout):
    import asyncpg

    if timeout <= 0:
        return TIMEOUT
    t_end = time.monotonic() + timeout
    try:
        if slot.conn is None or slot.conn.is_closed():
            slot.conn = await asyncpg.connect(
                host=a.host,
                port=a.port,
                user=a.user,
                database=a.db,
                statement_cache_size=0,
                timeout=min(timeout, CONNECT_TIMEOUT),
            )
        left = t_end - time.monotonic()
        if left <= 0:
            return TIMEOUT
        await slot.conn.execute(a.sql, timeout=left)
        return OK
    except asyncpg.PostgresError as e:
        code = getattr(e, "sqlstate", None) or CONN
        if slot.conn is not None and slot.conn.is_closed():
            slot.conn = None
        return code
    except (asyncio.TimeoutError, TimeoutError):
        slot.drop()
        return TIMEOUT
    except Exception:  # noqa: BLE001 - any other failure is a broken connection
        slot.drop()
        return CONN


async def run_action(a, slots, rec):
    good = a.kind == "good"
    t0 = now()
    m0 = time.monotonic()
    deadline = m0 + (GOOD_DEADLINE if good else a.attempt_timeout * NAIVE_ATTEMPTS)
    attempts = GOOD_ATTEMPTS if good else NAIVE_ATTEMPTS
    try:
        slot = await asyncio.wait_for(
            slots.get(), timeout=GOOD_DEADLINE if good else a.attempt_timeout
        )
    except (asyncio.TimeoutError, TimeoutError):
        rec["actions"].append([round(t0, 4), round(now() - t0, 4), "no_client_conn", 0])
        return
    code = CONN
    n = 0
    try:
        for n in range(1, attempts + 1):
            ts = now()
            m = time.monotonic()
            timeout = (deadline - m) if good else a.attempt_timeout
            code = await one_attempt(a, slot, timeout)
            rec["attempts"].append([round(ts, 4), round(now() - ts, 4), code, round(timeout, 4)])
            if code == OK or n == attempts:
                break
            if good:
                ceiling = min(GOOD_CAP, GOOD_BASE * (2 ** (n - 1)))
                pause = random.uniform(0, ceiling)
                if time.monotonic() + pause >= deadline:
                    break
                await asyncio.sleep(pause)
            # naive: again at once
    finally:
        slots.put_nowait(slot)
    rec["actions"].append([round(t0, 4), round(now() - t0, 4), code, n])


async def load(a):
    import asyncpg

    random.seed(a.seed)
    slots = asyncio.Queue()
    conns = await asyncio.gather(
        *[
            asyncpg.connect(
                host=a.host,
                port=a.port,
                user=a.user,
                database=a.db,
                statement_cache_size=0,
                timeout=10,
            )
            for _ in range(a.conns)
        ]
    )
    for c in conns:
        s = Slot()
        s.conn = c
        slots.put_nowait(s)
    rec = {"kind": a.kind, "rate": a.rate, "conns": a.conns, "actions": [], "attempts": []}
    await sleep_until(a.start)
    tasks = set()
    interval = 1.0 / a.rate
    i = 0
    while True:
        t = a.start + i * interval
        if t >= a.end:
            break
        await sleep_until(t)
        task = asyncio.create_task(run_action(a, slots, rec))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
    # Let actions in flight finish (bounded by their own timeouts).
    if tasks:
        await asyncio.wait(tasks, timeout=a.attempt_timeout * 3 + GOOD_DEADLINE)
    with open(a.out, "w") as f:
        json.dump(rec, f, separators=(",", ":"))
    os._exit(0)  # do not wait for connections stuck in a black hole


# ---------------------------------------------------------------------------------------------
# collect
# ---------------------------------------------------------------------------------------------


async def http_get(port, path, timeout=1.0):
    async def go():
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await w.drain()
        data = await r.read()
        w.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body.decode(errors="replace")

    try:
        return await asyncio.wait_for(go(), timeout)
    except Exception:  # noqa: BLE001 - unreachable is an answer too
        return 0, ""


def prom(text, name, contains=""):
    total = None
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        rest = line[len(name):]
        if not (rest.startswith(" ") or rest.startswith("{")) or contains not in line:
            continue
        try:
            v = float(line.rsplit(" ", 1)[1])
        except ValueError:
            continue
        total = (total or 0.0) + v
    return total


async def pgbouncer_pools(port, user):
    """cl_waiting etc. from SHOW POOLS on PgBouncer's admin console (psql: simple protocol)."""
    try:
        p = await asyncio.create_subprocess_exec(
            "psql", "-X", "-q", "-A", "-F", "|", "-h", "127.0.0.1", "-p", str(port), "-U", user,
            "-d", "pgbouncer", "-c", "SHOW POOLS",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await asyncio.wait_for(p.communicate(), 2.0)
    except Exception:  # noqa: BLE001
        return None
    lines = out.decode().strip().splitlines()
    if len(lines) < 2:
        return None
    head = lines[0].split("|")
    res = {}
    for line in lines[1:]:
        row = dict(zip(head, line.split("|")))
        if row.get("database") == "pgbouncer":
            continue
        for k in ("cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_login", "maxwait"):
            try:
                res[k] = res.get(k, 0) + int(row.get(k, 0))
            except ValueError:
                pass
    return res


async def collect(a):
    import asyncpg

    rec = {"stats": [], "pool": [], "live": [], "probe": []}
    await sleep_until(a.start)
    stop = a.end

    async def pg_stats():
        conn = None
        while now() < stop:
            t = now()
            calls = None
            try:
                if conn is None or conn.is_closed():
                    conn = await asyncpg.connect(
                        host=a.pg_sock, port=a.pg_port, user="postgres", database=a.db,
                        timeout=0.5,
                    )
                calls = await conn.fetchval(
                    "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements "
                    "WHERE query LIKE '%pg_sleep%gameday%'",
                    timeout=0.5,
                )
            except Exception:  # noqa: BLE001 - PostgreSQL stopped: no sample
                if conn is not None:
                    conn.terminate()
                conn = None
            rec["stats"].append([round(t, 3), calls])
            await sleep_until(t + 1.0)

    async def pool():
        while now() < stop:
            t = now()
            if a.target == "droid-pool":
                code, body = await http_get(a.admin_port, "/metrics")
                sample = {
                    "waiting": prom(body, "droidpool_clients", 'state="waiting"'),
                    "breaker": prom(body, "droidpool_breaker_state"),
                    "overflow": prom(body, "droidpool_retry_overflow_total"),
                    "retries": prom(body, "droidpool_retries_total"),
                    "shed": prom(body, "droidpool_clients_shed_total"),
                    "closed_client_ended": prom(
                        body, "droidpool_servers_closed_total", 'reason="client_ended"'
                    ),
                    # The pool's own clock on its immediate refusals (57P03, 53300).
                    "refusals": prom(body, "droidpool_refusal_seconds_count"),
                    "refusals_10ms": prom(
                        body, "droidpool_refusal_seconds_bucket", 'le="0.01"'
                    ),
                } if code == 200 else None
            else:
                p = await pgbouncer_pools(a.pooler_port, a.user)
                sample = {"waiting": p.get("cl_waiting"), "sv_login": p.get("sv_login")} if p else None
            rec["pool"].append([round(t, 3), sample])
            await sleep_until(t + 1.0)

    async def live():
        if a.target != "droid-pool":
            return
        while now() < stop:
            t = now()
            code, _ = await http_get(a.admin_port, "/livez")
            rec["live"].append([round(t, 3), code])
            await sleep_until(t + 0.25)

    async def probe():
        slot = Slot()
        pa = argparse.Namespace(host="127.0.0.1", port=a.pooler_port, user=a.user, db=a.db)
        while now() < stop:
            t = now()
            m = time.monotonic()
            code = await probe_once(pa, slot)
            rec["probe"].append([round(t, 4), round(time.monotonic() - m, 5), code])
            await sleep_until(t + 0.05)

    await asyncio.gather(pg_stats(), pool(), live(), probe())
    with open(a.out, "w") as f:
        json.dump(rec, f, separators=(",", ":"))
    os._exit(0)


async def probe_once(pa, slot):
    import asyncpg

    try:
        if slot.conn is None or slot.conn.is_closed():
            slot.conn = await asyncpg.connect(
                host=pa.host, port=pa.port, user=pa.user, database=pa.db,
                statement_cache_size=0, timeout=1.0,
            )
        await slot.conn.execute("SELECT 1 /* probe */", timeout=2.0)
        return OK
    except asyncpg.PostgresError as e:
        if slot.conn is not None and slot.conn.is_closed():
            slot.conn = None
        return getattr(e, "sqlstate", None) or CONN
    except (asyncio.TimeoutError, TimeoutError):
        slot.drop()
        return TIMEOUT
    except Exception:  # noqa: BLE001
        slot.drop()
        return CONN


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------

LOG_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) \w+ \[(\d+)\] (.*)$")


def pg_logins(path, client_host):
    """Connection attempts that reached PostgreSQL from `client_host`, as (time, outcome):
    a backend whose log says "connection received" and then "connection authorized" (ok) or
    a FATAL (failed). Backends that say nothing more were cancel requests: not logins."""
    received = {}
    outcome = {}
    try:
        f = open(path, errors="replace")
    except OSError:
        return []
    with f:
        for line in f:
            m = LOG_RE.match(line)
            if not m:
                continue
            ts, pid, msg = m.groups()
            if msg.startswith("LOG:  connection received:"):
                if f"host={client_host}" in msg:
                    t = datetime.strptime(ts, "%Y-%m-%d %H:%M:%S.%f")
                    received[pid] = t.replace(tzinfo=timezone.utc).timestamp()
                    outcome.pop(pid, None)
            elif pid in received and pid not in outcome:
                if msg.startswith("LOG:  connection authorized"):
                    outcome[pid] = "ok"
                elif msg.startswith("FATAL:"):
                    outcome[pid] = "failed"
    return sorted((received[p], o) for p, o in outcome.items())


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def breaker_open_spans(pooler_log, until):
    """[start, end) spans in which droid-pool's breaker was open or half-open, from the
    transitions it logs (text or JSON lines); empty for PgBouncer, which has no breaker."""
    spans, since = [], None
    try:
        with open(pooler_log, errors="replace") as f:
            lines = [ln for ln in f if "circuit breaker" in ln]
    except OSError:
        return spans
    for line in lines:
        m = re.search(r'"?to"?[=:]\s*"(\w+)"', line)
        ts = re.search(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z", line)
        if not m or not ts:
            continue
        stamp = datetime.fromisoformat(ts.group(1)[:26]).replace(tzinfo=timezone.utc)
        t = stamp.timestamp()
        if m.group(1) == "closed":
            if since is not None:
                spans.append((since, t))
            since = None
        elif since is None:
            since = t
    if since is not None:
        spans.append((since, until))
    return spans


def counter_delta(samples, key, a, b):
    """How much a counter sampled once a second grew from `a` to `b`: the last sample at or
    before `a` to the first at or after `b` (0 where the pooler exports no such counter)."""
    vals = [(t, s.get(key)) for t, s in samples if s and s.get(key) is not None]
    before = [v for t, v in vals if t <= a]
    after = [v for t, v in vals if t >= b]
    if not before or not after:
        return 0
    return int(after[0] - before[-1])


def in_spans(spans, t):
    return any(a <= t < b for a, b in spans)


def load_json(path, default):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def analyze_run(d, ev):
    """Per-second series (t = seconds since the fault began) and the criteria of one run."""
    fault, heal, end = ev["fault_start"], ev["heal"], ev["end"]
    base_from = fault - ev["baseline_s"]
    actions, attempts = [], []
    for kind in ("naive", "good"):
        r = load_json(os.path.join(d, f"{kind}.json"), {"actions": [], "attempts": []})
        actions += [x + [kind] for x in r["actions"]]
        # [start, duration, code, the attempt's own timeout (None in older runs), kind]
        attempts += [x[:3] + [x[3] if len(x) > 3 else None, kind] for x in r["attempts"]]
    col = load_json(os.path.join(d, "collect.json"), {"stats": [], "pool": [], "live": [], "probe": []})
    logins = pg_logins(os.path.join(d, "postgres.log"), ev["client_host"])

    t_lo = math.floor(base_from - fault)
    t_hi = math.ceil(end - fault)
    secs = list(range(t_lo, t_hi))

    def sec(t):
        return math.floor(t - fault)

    succ = defaultdict(int)
    fails = defaultdict(lambda: defaultdict(int))
    lat = defaultdict(list)
    for t0, dur, code, _n, _kind in actions:
        s = sec(t0 + dur)
        lat[s].append(dur)
        if code == OK:
            succ[s] += 1
        else:
            fails[s][code] += 1
    att_codes = defaultdict(lambda: defaultdict(int))
    for t0, dur, code, _to, _kind in attempts:
        att_codes[sec(t0 + dur)][code] += 1
    login_s = defaultdict(int)
    for t, _o in logins:
        login_s[sec(t)] += 1

    # queries/s at PostgreSQL from successive samples of the calls counter
    pgq = {}
    prev = None
    for t, calls in col["stats"]:
        if calls is None:
            prev = None
            continue
        if prev is not None and t > prev[0]:
            delta = calls - prev[1] if calls >= prev[1] else calls  # restarted: counts anew
            pgq[sec(t)] = delta / (t - prev[0])
        prev = (t, calls)
    pool = {sec(t): s for t, s in col["pool"] if s}

    series = {
        "t": secs,
        "success": [succ[s] for s in secs],
        "failures": {c: [fails[s].get(c, 0) for s in secs]
                     for c in sorted({c for s in fails for c in fails[s]})},
        "attempts": {c: [att_codes[s].get(c, 0) for s in secs]
                     for c in sorted({c for s in att_codes for c in att_codes[s]})},
        "latency_p50": [pct(lat[s], 0.50) for s in secs],
        "latency_p99": [pct(lat[s], 0.99) for s in secs],
        "pg_queries": [pgq.get(s) for s in secs],
        "pg_logins": [login_s[s] for s in secs],
        "waiting": [(pool.get(s) or {}).get("waiting") for s in secs],
        "breaker": [(pool.get(s) or {}).get("breaker") for s in secs],
        "overflow": [(pool.get(s) or {}).get("overflow") for s in secs],
    }

    # --- criteria ------------------------------------------------------------------------
    ends = sorted(t0 + dur for t0, dur, code, _n, _k in actions if code == OK)

    def successes(a, b):
        return bisect.bisect_left(ends, b) - bisect.bisect_left(ends, a)

    base_success = successes(base_from, fault) / ev["baseline_s"]
    recovery = None
    t = heal
    while t < end - 1:
        if successes(t, t + 1) >= 0.9 * base_success:
            recovery = t + 1 - heal
            break
        t += 0.1
    limit = 5.0 if ev["scenario"] == "blackhole" else 3.0

    base_q = [q for s, q in pgq.items() if base_from - fault <= s < 0]
    base_pgq = sum(base_q) / len(base_q) if base_q else None
    after_q = [q for s, q in pgq.items() if heal - fault <= s < heal - fault + 60]
    peak_pgq = max(after_q) if after_q else None

    logins_after = sum(1 for t, _o in logins if heal <= t < heal + 10)
    login_limit = ev["pool_size"] * 1.1
    # A client that gives up mid-query (a good client's last attempt has little time left)
    # leaves its server mid-statement: the pooler closes it and a login replaces it, at any
    # time, baseline included. That is churn, not a recovery storm: droid-pool counts such
    # closes (droidpool_servers_closed_total{reason="client_ended"}), and the logins that
    # replace them are not held against the recovery.
    replaced = counter_delta(col["pool"], "closed_client_ended", heal, heal + 10)
    recovery_logins = logins_after - replaced

    in_fault = [s for t, s in col["pool"] if s and fault <= t < heal]
    waits = [s.get("waiting") for s in in_fault if s.get("waiting") is not None]
    max_waiting = max(waits) if waits else None

    # Late: an attempt that ran past its own timeout + 100 ms, or that the pooler left
    # unanswered until the client gave up although the client allowed more than the pooler's
    # admission deadline (query_wait_timeout) + 100 ms. A good client's last attempt often
    # has less time left than that deadline; its timeout is the client's choice, not a wait
    # past its deadline.
    answer_by = ev.get("query_wait_timeout_s", 1.0) + 0.1
    late = 0
    started_in_fault = 0
    for t0, dur, code, own, kind in attempts:
        if fault <= t0 < heal:
            started_in_fault += 1
            if own is None:  # older runs: the client kind's whole allowance
                own = NAIVE_TIMEOUT if kind == "naive" else GOOD_DEADLINE
            if dur > own + 0.1 or (code == TIMEOUT and own >= answer_by):
                late += 1
    # Issue 5's criterion is about breaker-open refusals: a request that arrives while the
    # breaker is open or half-open. A client already queued when it opens is told 57P03 too,
    # but after its wait (bounded by query_wait_timeout, judged by late_waits): shown apart.
    not_closed = breaker_open_spans(os.path.join(d, "pooler.err"), heal)
    answered = [(t0, dur) for t0, dur, code in col["probe"] if code == "57P03"]
    answered += [(t0, dur) for t0, dur, code, _to, _k in attempts if code == "57P03"]
    answered = [(t0, dur) for t0, dur in answered if fault <= t0 < heal]
    refusals = [dur for t0, dur in answered if in_spans(not_closed, t0)]
    queued = [dur for t0, dur in answered if not in_spans(not_closed, t0)]
    p99_refusal = pct(refusals, 0.99)
    # The clients' clock includes their own event loop: one Python process sending over a
    # thousand attempts a second on a 2-core machine that also runs the pooler and
    # PostgreSQL (its median moved from 0.1 to 0.3 ms between two runs of the same binary).
    # So the 10 ms bound is judged on the pool's clock, which starts when the pooler reads
    # the request, and the clients' clock must stay within 100 ms: a refusal that waits for
    # a login or a timeout (a second) still fails it.
    pool_refusals = counter_delta(col["pool"], "refusals", fault, heal)
    pool_within = counter_delta(col["pool"], "refusals_10ms", fault, heal)
    pool_share = pool_within / pool_refusals if pool_refusals else None
    live = [c for t, c in col["live"] if fault <= t < heal]
    fault_codes = defaultdict(int)
    for t0, dur, code, _to, _k in attempts:
        if fault <= t0 < heal + 1:
            fault_codes[code] += 1

    # What PgBouncer told clients (asyncpg reports its FATAL-and-close as 08003, "connection
    # was closed in the middle of operation"): the "pooler error" lines of its log.
    pooler_errors = defaultdict(int)
    try:
        with open(os.path.join(d, "pgbouncer.log"), errors="replace") as f:
            for line in f:
                if "pooler error: " in line:
                    pooler_errors[line.split("pooler error: ", 1)[1].strip()] += 1
    except OSError:
        pass

    droid = ev["target"] == "droid-pool"
    crit = {
        "recovery_s": {
            "value": None if recovery is None else round(recovery, 1),
            "limit": limit,
            "pass": recovery is not None and recovery <= limit,
            "baseline_success_per_s": round(base_success, 1),
        },
        "peak_pg_qps_after": {
            "value": None if peak_pgq is None else round(peak_pgq, 1),
            "baseline": None if base_pgq is None else round(base_pgq, 1),
            "limit": None if base_pgq is None else round(1.5 * base_pgq, 1),
            "pass": peak_pgq is not None and base_pgq is not None and peak_pgq <= 1.5 * base_pgq,
        },
        "logins_first_10s": {
            "value": recovery_logins,
            "all": logins_after,
            "replacing_client_ended": replaced,
            "limit": round(login_limit, 1),
            "pass": recovery_logins <= login_limit,
        },
        "max_waiting": {
            "value": max_waiting,
            "limit": ev.get("max_waiting"),
            "pass": max_waiting is not None and ev.get("max_waiting") is not None
            and max_waiting <= ev["max_waiting"],
        },
        "late_waits": {
            "value": late,
            "of": started_in_fault,
            "limit": 0,
            "pass": late == 0,
        },
        "refusal_57P03_p99_ms": {
            "value": None if p99_refusal is None else round(p99_refusal * 1000, 2),
            "count": len(refusals),
            "limit": 100,
            "pool_refusals": pool_refusals,
            "pool_within_10ms": None if pool_share is None else round(100 * pool_share, 2),
            "pass": p99_refusal is not None and p99_refusal <= 0.100
            and pool_share is not None and pool_share >= 0.99,
            "queued_when_opened": len(queued),
            "queued_max_ms": round(max(queued) * 1000, 1) if queued else None,
        },
        "liveness": {
            "value": "all 200" if live and all(c == 200 for c in live)
            else (f"{sum(c != 200 for c in live)} of {len(live)} not 200" if live else "n/a"),
            "pass": bool(live) and all(c == 200 for c in live),
        },
    }
    if not droid:
        # PgBouncer has no waiting cap, no 57P03 and no liveness endpoint: shown, not judged.
        for k in ("max_waiting", "refusal_57P03_p99_ms", "liveness"):
            crit[k]["pass"] = None
    verdict = all(c["pass"] for c in crit.values() if c["pass"] is not None)
    return {
        "target": ev["target"],
        "scenario": ev["scenario"],
        "events": ev,
        "criteria": crit,
        "pass": verdict,
        "attempts_from_fault_to_heal_plus_1s": dict(sorted(fault_codes.items())),
        "login_attempts_total": len(logins),
        "pgbouncer_pooler_errors": dict(pooler_errors),
        "series": series,
    }


SCENARIO_TITLE = {
    "blackhole": "black hole (nft drop)",
    "refused": "refused (nft reject with tcp reset)",
    "stop": "PostgreSQL stopped and started",
}

CODE_COLORS = {
    "57P03": "tab:orange", "57014": "tab:purple", "53300": "tab:brown", "08P01": "black",
    "08006": "tab:red", "08001": "salmon", TIMEOUT: "tab:gray", CONN: "darkred",
    "no_client_conn": "lightgray", "57P01": "gold", "08003": "tab:cyan",
}


CODE_LABELS = {
    "08003": "08003: connection closed (asyncpg)",
    TIMEOUT: "client timeout",
    CONN: "connection error",
    "no_client_conn": "no free client connection",
}


def chart(runs, scenario, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = [r for r in runs if r["scenario"] == scenario]
    fig, axes = plt.subplots(4, len(targets), figsize=(7 * len(targets), 12), sharex=True,
                             squeeze=False)
    for col, r in enumerate(targets):
        s = r["series"]
        ev = r["events"]
        t = s["t"]
        heal = ev["heal"] - ev["fault_start"]
        ax = axes[0][col]
        bottom = [0] * len(t)
        for code, vals in s["failures"].items():
            ax.bar(t, vals, bottom=bottom, width=1.0, align="edge", alpha=0.6,
                   color=CODE_COLORS.get(code), label=f"failed {CODE_LABELS.get(code, code)}")
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.step(t, s["success"], where="post", color="tab:green", lw=2, label="succeeded")
        ax.set_ylabel("client actions / s")
        verdict = "PASS" if r["pass"] else "FAIL"
        ax.set_title(f"{r['target']}: {SCENARIO_TITLE[scenario]} - {verdict}")
        ax.legend(fontsize=7, loc="upper right", ncol=2)
        ax = axes[1][col]
        q = [v if v is not None else float("nan") for v in s["pg_queries"]]
        ax.step(t, q, where="post", color="tab:blue", lw=2, label="queries/s at PostgreSQL")
        ax.bar(t, s["pg_logins"], width=1.0, align="edge", color="tab:red", alpha=0.5,
               label="login attempts/s at PostgreSQL")
        ax.set_ylabel("PostgreSQL")
        ax.legend(fontsize=7, loc="upper right")
        ax = axes[2][col]
        for key, style, lab in (("latency_p50", "-", "p50"), ("latency_p99", "--", "p99")):
            v = [x * 1000 if x is not None else float("nan") for x in s[key]]
            ax.step(t, v, where="post", ls=style, color="black", label=f"action latency {lab}")
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7, loc="upper right")
        ax = axes[3][col]
        w = [v if v is not None else float("nan") for v in s["waiting"]]
        ax.step(t, w, where="post", color="tab:purple", label="waiting clients")
        if ev.get("max_waiting"):
            ax.axhline(ev["max_waiting"], color="tab:purple", ls=":", lw=1, label="waiting cap")
        ax.set_ylabel("waiting clients")
        ax.set_xlabel("seconds since the fault began")
        ax2 = ax.twinx()
        if any(v is not None for v in s["breaker"]):
            b = [v if v is not None else float("nan") for v in s["breaker"]]
            ax2.step(t, b, where="post", color="tab:red", label="breaker (0 closed, 1 half-open, 2 open)")
            o = [v if v is not None else float("nan") for v in s["overflow"]]
            ax2.step(t, o, where="post", color="tab:orange", ls="--", label="retry overflow (total)")
            ax2.legend(fontsize=7, loc="upper left")
        ax.legend(fontsize=7, loc="upper right")
        for row in axes:
            row[col].axvspan(0, heal, color="red", alpha=0.08)
            row[col].axvline(heal, color="tab:green", ls=":", lw=1)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def fmt(c, key):
    v = c.get("value")
    if v is None:
        return "-"
    if key == "recovery_s":
        return f"{v} s"
    if key == "peak_pg_qps_after":
        return f"{v} (base {c['baseline']})"
    if key == "logins_first_10s" and c.get("replacing_client_ended"):
        return f"{v} ({c['all']} less {c['replacing_client_ended']} replacing servers whose client left mid-query)"
    if key == "late_waits":
        return f"{v} of {c['of']}"
    if key == "refusal_57P03_p99_ms":
        queued = c.get("queued_when_opened")
        extra = f"; {queued} queued before it opened, slowest {c['queued_max_ms']} ms" if queued else ""
        pool = c.get("pool_within_10ms")
        pool = f"{pool} % of {c.get('pool_refusals')}" if pool is not None else "none counted"
        return f"pooler's clock: {pool} within 10 ms; clients' p99 {v} ms (n={c['count']}{extra})"
    return str(v)


CRIT_TITLE = {
    "recovery_s": "success ≥ 90 % of baseline after heal (≤ 3 s; black hole ≤ 5 s)",
    "peak_pg_qps_after": "peak queries/s at PostgreSQL after heal (≤ 1.5 × baseline)",
    "logins_first_10s": "server logins in the first 10 s after heal (≤ pool size + 10 %)",
    "max_waiting": "waiting clients during the fault (≤ cap)",
    "late_waits": "attempts past the client's deadline + 100 ms during the fault (0)",
    "refusal_57P03_p99_ms": "refusals while the breaker is open: ≥ 99 % within 10 ms on the pooler's clock, p99 ≤ 100 ms on the clients'",
    "liveness": "liveness during the fault (200)",
}


def mark(p):
    return "" if p is None else (" ✅" if p else " ❌")


def table(runs):
    lines = []
    targets = sorted({r["target"] for r in runs}, key=lambda x: x != "droid-pool")
    for scenario in SCENARIO_TITLE:
        rs = {r["target"]: r for r in runs if r["scenario"] == scenario}
        if not rs:
            continue
        lines.append(f"\n**{SCENARIO_TITLE[scenario]}**\n")
        lines.append("| criterion | " + " | ".join(targets) + " |")
        lines.append("|---|" + "---|" * len(targets))
        for key, title in CRIT_TITLE.items():
            cells = []
            for t in targets:
                c = rs[t]["criteria"][key] if t in rs else {}
                cells.append(fmt(c, key) + mark(c.get("pass")) if c else "-")
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
        cells = []
        for t in targets:
            if t in rs:
                codes = rs[t]["attempts_from_fault_to_heal_plus_1s"]
                cells.append(", ".join(f"{k}: {v}" for k, v in codes.items()) or "-")
            else:
                cells.append("-")
        lines.append("| client attempts by outcome, fault start to heal + 1 s | " + " | ".join(cells) + " |")
        if any(rs[t].get("pgbouncer_pooler_errors") for t in rs):
            cells = []
            for t in targets:
                errs = rs[t].get("pgbouncer_pooler_errors") if t in rs else None
                cells.append("; ".join(f"{m}: {n}" for m, n in errs.items()) if errs else "-")
            lines.append("| PgBouncer's FATAL errors to clients (08P01, from its log) | " + " | ".join(cells) + " |")
        cells = ["**PASS**" if rs[t]["pass"] else "**FAIL**" if t in rs else "-" for t in targets]
        lines.append("| verdict | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(a):
    runs = []
    for name in sorted(os.listdir(a.dir)):
        d = os.path.join(a.dir, name)
        ev = load_json(os.path.join(d, "events.json"), None)
        if ev is None:
            continue
        runs.append(analyze_run(d, ev))
    if not runs:
        print("no runs found in", a.dir)
        return 2
    with open(os.path.join(a.dir, "results.json"), "w") as f:
        json.dump({"generated": datetime.now(timezone.utc).isoformat(), "runs": runs}, f, indent=1)
    pngs = []
    for scenario in SCENARIO_TITLE:
        if any(r["scenario"] == scenario for r in runs):
            p = os.path.join(a.dir, f"gameday-{scenario}.png")
            chart(runs, scenario, p)
            pngs.append(p)
    md = table(runs)
    with open(os.path.join(a.dir, "results.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    print()
    exit_code = 0
    for r in runs:
        verdict = "PASS" if r["pass"] else "FAIL"
        failed = [k for k, c in r["criteria"].items() if c["pass"] is False]
        print(f"{verdict}  {r['target']:10s} {r['scenario']:9s}" + (f"  failed: {', '.join(failed)}" if failed else ""))
        if r["target"] == "droid-pool" and not r["pass"]:
            exit_code = 1
    if a.readme:
        publish(a, runs, md, pngs)
    return exit_code


def publish(a, runs, md, pngs):
    import shutil

    latest = os.path.join(os.path.dirname(a.readme), "gameday", "latest")
    os.makedirs(latest, exist_ok=True)
    for p in pngs:
        shutil.copy(p, latest)
    shutil.copy(os.path.join(a.dir, "results.json"), latest)
    ev = runs[0]["events"]
    rel = os.path.relpath(latest, os.path.dirname(a.readme))
    body = [
        "<!-- gameday:results:start (written by chaos/gameday/run.sh; do not edit) -->",
        f"Latest run: {datetime.fromtimestamp(ev['t0'], timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, "
        f"{'short (--short)' if ev.get('short') else 'full'}: baseline {ev['baseline_s']} s, "
        f"fault {ev['fault_s']} s, observed {ev['after_s']} s after the heal; "
        f"droid-pool {ev.get('version', '?')}, {ev.get('pgbouncer_version', 'PgBouncer')}.",
        md,
        "",
    ]
    for p in pngs:
        name = os.path.basename(p)
        body.append(f"![{name}]({rel}/{name})")
        body.append("")
    body.append("<!-- gameday:results:end -->")
    text = open(a.readme).read()
    start = text.index("<!-- gameday:results:start")
    stop = text.index("<!-- gameday:results:end -->") + len("<!-- gameday:results:end -->")
    with open(a.readme, "w") as f:
        f.write(text[:start] + "\n".join(body) + text[stop:])


# ---------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("load")
    lp.add_argument("--kind", choices=("naive", "good"), required=True)
    lp.add_argument("--host", default="127.0.0.1")
    lp.add_argument("--port", type=int, required=True)
    lp.add_argument("--user", default="gameday")
    lp.add_argument("--db", default="gameday")
    lp.add_argument("--rate", type=float, required=True, help="actions per second")
    lp.add_argument("--conns", type=int, required=True, help="client connections")
    lp.add_argument("--start", type=float, required=True)
    lp.add_argument("--end", type=float, required=True)
    lp.add_argument("--seed", type=int, default=1)
    lp.add_argument("--sql", default=SQL, help="what each attempt runs (simple protocol)")
    lp.add_argument("--attempt-timeout", type=float, default=NAIVE_TIMEOUT,
                    help="a naive client's limit per attempt, seconds")
    lp.add_argument("--out", required=True)
    cp = sub.add_parser("collect")
    cp.add_argument("--target", choices=("droid-pool", "pgbouncer"), required=True)
    cp.add_argument("--pg-sock", required=True)
    cp.add_argument("--pg-port", type=int, default=5432)
    cp.add_argument("--pooler-port", type=int, required=True)
    cp.add_argument("--admin-port", type=int, default=0)
    cp.add_argument("--user", default="gameday")
    cp.add_argument("--db", default="gameday")
    cp.add_argument("--start", type=float, required=True)
    cp.add_argument("--end", type=float, required=True)
    cp.add_argument("--out", required=True)
    rp = sub.add_parser("report")
    rp.add_argument("--dir", required=True)
    rp.add_argument("--readme", help="chaos/README.md to update (and chaos/gameday/latest/)")
    a = p.parse_args()
    if a.cmd == "load":
        asyncio.run(load(a))
    elif a.cmd == "collect":
        asyncio.run(collect(a))
    else:
        sys.exit(report(a))


if __name__ == "__main__":
    main()
