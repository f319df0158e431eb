#!/usr/bin/env python3
"""Runs the droid-pool benchmark and writes the report (driven by bench/run.sh).

bench/run.sh starts PostgreSQL, droid-pool (plain and --track-prepared) and
PgBouncer, then calls this script with their ports and PIDs. This script:

* runs pgbench for each row (-S simple, -S extended, -S prepared, TPC-B) at
  50 clients, in rounds that alternate direct / droid-pool / PgBouncer;
* reads each pooler's CPU time (utime+stime in /proc/PID/stat) around each run;
* measures 1-client latency (average, p99 from pgbench's per-transaction log);
* runs 500 clients over the same pool of 20;
* runs -S simple through a minimal relay (bench/floor/relay.c: recv and send,
  nothing else) for the floor of any relaying pooler's CPU per transaction, and
  through the same relay over io_uring (bench/floor/uring_relay.c) when run.sh
  could start it;
* opens N idle authenticated client connections and reads VmRSS before/after, on a
  droid-pool and a PgBouncer process that served nothing before (run.sh starts them);
* writes a Markdown report and a PNG chart, and prints the targets table.

Numbers are never hard-coded: every PASS/FAIL is computed from this run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import glob
import json
import math
import resource
import os
import platform
import re
import statistics
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

DIRECT = "direct"
DROID = "droid-pool"
DROID_TP = "droid-pool --track-prepared"
DROID_TRACK = "droid-pool session_state: track"
PGB = "PgBouncer"
FLOOR = "minimal relay"
FLOOR_URING = "minimal relay, io_uring"

CLK_TCK = int(subprocess.run(["getconf", "CLK_TCK"], capture_output=True, text=True, check=True).stdout)


# --- helpers -------------------------------------------------------------------
# Where the sections other scripts write into docs/benchmarks.md begin (kept by a new run).
KEPT_MARKER = "<!-- sections below: written by other scripts, kept by bench/run.sh -->"

def median(values):
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def percentile(sorted_vals, p):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_vals:
        return None
    rank = max(1, math.ceil(p / 100.0 * len(sorted_vals)))
    return sorted_vals[rank - 1]


def cpu_ticks(pid):
    """utime+stime (clock ticks) of the whole process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime is field 14, stime field 15.
    return int(fields[11]) + int(fields[12])


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except OSError:
        return False


def machine_ticks():
    """(busy, steal) clock ticks of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return user + nice + system + irq + softirq, steal


def pg_tree_ticks(pm_pid):
    """CPU ticks of the postmaster, its reaped children and its live children."""
    total = 0
    try:
        with open(f"/proc/{pm_pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    except OSError:
        return 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pm_pid:
            total += int(fields[11]) + int(fields[12])
    return total


def sh(cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()


def fmt(v, spec=".0f", none="n/a"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec)


# --- pgbench -----------------------------------------------------------------------
@dataclass
class Run:
    kind: str  # "row:<name>", "lat1", "c500", "warmup"
    system: str
    round: int
    cmd: list
    tps: float | None = None
    txns: int | None = None
    failed: int | None = None
    aborted_clients: int = 0
    exit_code: int | None = None
    latency_avg_ms: float | None = None
    p99_ms: float | None = None
    log_avg_ms: float | None = None
    cpu_us_per_txn: float | None = None
    cpu_s: float | None = None
    pooler_alive_after: bool | None = None
    other_cpu_pct: float | None = None
    steal_pct: float | None = None
    waited_s: float = 0.0
    errors: list = field(default_factory=list)

    @property
    def errored(self):
        return bool(self.failed) or self.aborted_clients > 0 or self.exit_code != 0 or self.tps is None


class Bench:
    def __init__(self, args):
        self.a = args
        self.smoke = args.smoke
        self.systems = {
            DIRECT: (args.pg_port, None),
            DROID: (args.droid_port, args.droid_pid),
            DROID_TP: (args.droid_tp_port, args.droid_tp_pid),
            DROID_TRACK: (args.droid_track_port, args.droid_track_pid),
            PGB: (args.pgb_port, args.pgb_pid),
            FLOOR: (args.floor_port, args.floor_pid),
        }
        # The relays that run in this harness: the io_uring one only where it could start.
        self.floors = [FLOOR]
        if args.uring_port is not None:
            self.systems[FLOOR_URING] = (args.uring_port, args.uring_pid)
            self.floors.append(FLOOR_URING)
        self.runs: list[Run] = []
        self.ncpu = os.cpu_count() or 1
        self.max_quiet_wait = 0 if args.smoke else 120  # per run
        self.quiet_budget = 0 if args.smoke else 1200  # in all
        self.seq = 0
        os.makedirs(args.work_dir, exist_ok=True)
        if self.smoke:
            self.rounds, self.t_row, self.t_lat, self.t_500, self.t_warm = 1, 3, 3, 3, 1
        else:
            self.rounds, self.t_row, self.t_lat, self.t_500, self.t_warm = 3, 20, 15, 20, 5
        self.rows = [
            ("select-simple", "-S -M simple", ["-S", "-M", "simple"], [DIRECT, DROID, DROID_TRACK, PGB]),
            ("select-extended", "-S -M extended", ["-S", "-M", "extended"], [DIRECT, DROID, DROID_TRACK, PGB]),
            ("select-prepared", "-S -M prepared", ["-S", "-M", "prepared"], [DIRECT, DROID_TP]),
            ("tpcb", "TPC-B (default script)", [], [DIRECT, DROID, DROID_TRACK, PGB]),
        ]

    def psql_direct(self, sql):
        subprocess.run(
            ["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(self.a.pg_port), "-U", "postgres",
             "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql],
            check=True, capture_output=True, text=True,
        )

    def prepare_db(self):
        # What pgbench's own pre-run vacuum does (we pass -n so that it is not
        # sent through the pooler), plus a checkpoint so no run inherits one.
        for sql in ("VACUUM pgbench_branches", "VACUUM pgbench_tellers",
                    "TRUNCATE pgbench_history", "CHECKPOINT"):
            self.psql_direct(sql)

    def pgbench(self, kind, system, rnd, extra, clients, threads, duration, log=False, sampling=None):
        port, pid = self.systems[system]
        self.seq += 1
        cmd = [self.a.pgbench, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-n",
               "-c", str(clients), "-j", str(threads), "-T", str(duration), *extra]
        log_prefix = None
        if log:
            log_dir = os.path.join(self.a.work_dir, f"log{self.seq}")
            os.makedirs(log_dir, exist_ok=True)
            log_prefix = os.path.join(log_dir, "pgbench_log")
            cmd += ["--log", f"--log-prefix={log_prefix}"]
            if sampling:
                cmd += [f"--sampling-rate={sampling}"]
        cmd.append("postgres")
        run = Run(kind=kind, system=system, round=rnd, cmd=cmd)
        self.prepare_db()
        run.waited_s = self.wait_quiet()
        ours0, (busy0, steal0), t0 = self.our_ticks(), machine_ticks(), time.monotonic()
        c0 = cpu_ticks(pid) if pid else None
        proc = subprocess.run(cmd, capture_output=True, text=True)
        c1 = cpu_ticks(pid) if pid else None
        (busy1, steal1), t1 = machine_ticks(), time.monotonic()
        # Backends that pgbench's disconnect ends are accounted to the postmaster
        # only once reaped: read our side a moment later.
        time.sleep(0.5)
        ours1 = self.our_ticks()
        capacity = (t1 - t0) * CLK_TCK * self.ncpu
        if capacity > 0:
            run.other_cpu_pct = max(0.0, ((busy1 - busy0) - (ours1 - ours0)) / capacity * 100)
            run.steal_pct = (steal1 - steal0) / capacity * 100
        out, err = proc.stdout, proc.stderr
        run.exit_code = proc.returncode
        m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
        run.tps = float(m.group(1)) if m else None
        m = re.search(r"number of transactions actually processed: (\d+)", out)
        run.txns = int(m.group(1)) if m else None
        m = re.search(r"number of failed transactions: (\d+)", out)
        run.failed = int(m.group(1)) if m else (0 if run.txns is not None else None)
        m = re.search(r"latency average = ([\d.]+) ms", out)
        run.latency_avg_ms = float(m.group(1)) if m else None
        run.aborted_clients = len(re.findall(r"client \d+ .*aborted", err))
        run.errors = [line for line in err.splitlines() if line.strip()][:8]
        if pid:
            run.pooler_alive_after = alive(pid)
            if c0 is not None and c1 is not None and run.txns:
                run.cpu_s = (c1 - c0) / CLK_TCK
                run.cpu_us_per_txn = run.cpu_s / run.txns * 1e6
        if log_prefix:
            lat = []
            for path in glob.glob(log_prefix + ".*"):
                with open(path) as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) >= 3 and parts[2].isdigit():
                            lat.append(int(parts[2]))
                os.unlink(path)
            lat.sort()
            if lat:
                run.p99_ms = percentile(lat, 99) / 1000.0
                run.log_avg_ms = sum(lat) / len(lat) / 1000.0
        self.runs.append(run)
        status = "ok" if not run.errored else f"ERRORS (exit {run.exit_code}, failed {run.failed}, aborted {run.aborted_clients})"
        print(f"  [{kind:>22}] r{rnd} {system:<28} tps {fmt(run.tps, '10.0f')}"
              f"  cpu/txn {fmt(run.cpu_us_per_txn, '6.1f')} us"
              f"  lat {fmt(run.latency_avg_ms, '.3f')} ms p99 {fmt(run.p99_ms, '.3f')} ms"
              f"  other {fmt(run.other_cpu_pct, '.0f')}%  {status}",
              flush=True)
        if run.errors and run.errored:
            for line in run.errors[:4]:
                print(f"      {line}", flush=True)
        return run

    def our_ticks(self):
        """CPU ticks used so far by everything this benchmark runs: the poolers,
        PostgreSQL (postmaster and its children) and pgbench (our children)."""
        total = sum(cpu_ticks(pid) or 0 for _port, pid in self.systems.values() if pid)
        total += pg_tree_ticks(self.a.pg_pid)
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return total + round((ru.ru_utime + ru.ru_stime) * CLK_TCK)

    def other_load(self, seconds=1.0):
        """Share of the machine (%) busy with processes outside the benchmark."""
        ours0, (busy0, _), t0 = self.our_ticks(), machine_ticks(), time.monotonic()
        time.sleep(seconds)
        ours1, (busy1, _), t1 = self.our_ticks(), machine_ticks(), time.monotonic()
        return max(0.0, ((busy1 - busy0) - (ours1 - ours0)) / ((t1 - t0) * CLK_TCK * self.ncpu) * 100)

    def wait_quiet(self, threshold_pct=15.0):
        """Waits (at most max_quiet_wait s) until other processes use less than
        threshold_pct of the machine, so that runs are not measured under a build."""
        limit = min(self.max_quiet_wait, self.quiet_budget)
        if limit <= 0:
            return 0.0
        t0 = time.monotonic()
        warned = False
        while time.monotonic() - t0 < limit:
            load = self.other_load()
            if load < threshold_pct:
                break
            if not warned:
                print(f"      (other processes use {load:.0f}% of the machine: waiting up to "
                      f"{self.max_quiet_wait} s for them to finish)", flush=True)
                warned = True
        waited = time.monotonic() - t0
        self.quiet_budget -= waited
        return waited

    # --- phases ---------------------------------------------------------------
    def warmup(self):
        print("warm-up (not reported)", flush=True)
        for system in (DIRECT, DROID, DROID_TP, DROID_TRACK, PGB):
            self.pgbench("warmup", system, 0, ["-S"], 50, 2, self.t_warm)
        self.pgbench("warmup", DROID_TP, 0, ["-S", "-M", "prepared"], 50, 2, self.t_warm)

    def round(self, rnd):
        print(f"round {rnd}/{self.rounds}", flush=True)
        for name, _label, extra, systems in self.rows:
            for system in systems:
                self.pgbench(f"row:{name}", system, rnd, extra, 50, 2, self.t_row)
            if name == "select-simple":
                # Right after the row it is compared with, in the same round.
                for floor in self.floors:
                    self.pgbench("floor", floor, rnd, extra, 50, 2, self.t_row)
        for system in (DROID, PGB):
            self.pgbench("c500", system, rnd, ["-S"], 500, 2, self.t_500, log=True, sampling=0.1)
        for system in (DIRECT, DROID, PGB):
            self.pgbench("lat1", system, rnd, ["-S", "-M", "simple"], 1, 1, self.t_lat, log=True)

    def idle(self):
        n = self.a.idle_clients
        results = {}
        # droid-pool's and PgBouncer's figures are read on processes of their own that served
        # nothing but a readiness probe: on one that ran the load, memory freed and kept by the
        # allocator takes the clients in without growth. --track-prepared's figure is read
        # after its load (its row), for comparison.
        fresh = {DROID: (self.a.droid_idle_port, self.a.droid_idle_pid),
                 PGB: (self.a.pgb_idle_port, self.a.pgb_idle_pid)}
        for system in (DROID, DROID_TP, PGB):
            port, pid = fresh.get(system, self.systems[system])
            print(f"idle clients: {n} to {system}"
                  f" ({'a fresh process' if system in fresh else 'after its load'}, pid {pid})", flush=True)
            # The load before may leave memory freed but not yet returned, which the allocator
            # gives back while the clients open (RSS falls): that figure measured nothing. The
            # measurement is then made again, once, on the settled process; both are reported.
            for attempt in (1, 2):
                r = asyncio.run(idle_test(port, pid, n))
                r["attempt"] = attempt
                r["fresh"] = system in fresh
                print(f"  accepted {r['accepted']}/{n}, RSS {r['rss_before_kib']} -> {r['rss_after_kib']} KiB, "
                      f"{fmt(r['kib_per_client'], '.2f')} KiB/client, valid {r['valid']}, "
                      f"errors {r['errors'][:3]}", flush=True)
                if attempt == 2:
                    r["first_attempt"] = results[system]
                results[system] = r
                time.sleep(1)
                if r["valid"]:
                    break
        return results

    # --- results --------------------------------------------------------------------
    def get(self, kind, system, rnd):
        for r in self.runs:
            if r.kind == kind and r.system == system and r.round == rnd:
                return r
        return None

    def per_round(self, kind, system, attr):
        return [getattr(self.get(kind, system, rnd), attr, None) if self.get(kind, system, rnd) else None
                for rnd in range(1, self.rounds + 1)]

    def ratio_rounds(self, kind_a, sys_a, kind_b, sys_b, attr="tps"):
        out = []
        for rnd in range(1, self.rounds + 1):
            a, b = self.get(kind_a, sys_a, rnd), self.get(kind_b, sys_b, rnd)
            va, vb = getattr(a, attr, None) if a else None, getattr(b, attr, None) if b else None
            out.append(va / vb if va is not None and vb else None)
        return out

    def diff_rounds(self, kind, sys_a, sys_b, attr):
        out = []
        for rnd in range(1, self.rounds + 1):
            a, b = self.get(kind, sys_a, rnd), self.get(kind, sys_b, rnd)
            va, vb = getattr(a, attr, None) if a else None, getattr(b, attr, None) if b else None
            out.append(va - vb if va is not None and vb is not None else None)
        return out

    def errors_of(self, kinds, system):
        runs = [r for r in self.runs if r.system == system and r.kind in kinds]
        return {
            "runs": len(runs),
            "errored_runs": sum(1 for r in runs if r.errored),
            "failed_txns": sum(r.failed or 0 for r in runs),
            "aborted_clients": sum(r.aborted_clients for r in runs),
            "nonzero_exits": sum(1 for r in runs if r.exit_code != 0),
            "samples": [e for r in runs if r.errored for e in r.errors][:6],
        }


async def idle_test(port, pid, n, concurrency=400):
    """Opens n authenticated client connections (StartupMessage, read up to
    ReadyForQuery), keeps them idle, and reads the pooler's VmRSS before/after."""
    params = b"user\0postgres\0database\0postgres\0\0"
    startup = struct.pack("!ii", 8 + len(params), 196608) + params
    sem = asyncio.Semaphore(concurrency)
    conns, errors = [], []

    async def open_one():
        async with sem:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
            except Exception as e:  # noqa: BLE001 - any failure counts as not accepted
                errors.append(f"connect: {e!r}")
                return
            try:
                writer.write(startup)
                await writer.drain()
                while True:
                    header = await asyncio.wait_for(reader.readexactly(5), 30)
                    tag, length = header[:1], struct.unpack("!i", header[1:])[0]
                    body = await asyncio.wait_for(reader.readexactly(length - 4), 30)
                    if tag == b"Z":
                        conns.append(writer)
                        return
                    if tag == b"E":
                        fields = dict((f[:1], f[1:]) for f in body.split(b"\0") if f)
                        errors.append(f"{fields.get(b'C', b'?').decode()} {fields.get(b'M', b'').decode()}")
                        writer.close()
                        return
            except Exception as e:  # noqa: BLE001
                errors.append(f"startup: {e!r}")
                writer.close()

    time.sleep(1)
    # The pooler's RSS moves a little on its own (allocator, heartbeat): sampled before the
    # clients come, its spread is the noise a per-client figure must stand above.
    samples = []
    for _ in range(5):
        samples.append(rss_kib(pid))
        time.sleep(0.2)
    before = samples[-1]
    noise = (max(samples) - min(samples)) if None not in samples else None
    t0 = time.monotonic()
    await asyncio.gather(*(open_one() for _ in range(n)))
    open_s = time.monotonic() - t0
    await asyncio.sleep(3)  # let the pooler settle
    after = rss_kib(pid)
    # Are they still there? A pooler that dropped idle clients would show EOF.
    await asyncio.sleep(0.2)
    still_open = sum(1 for w in conns if not w.transport.is_closing())
    for w in conns:
        w.close()
    await asyncio.sleep(0.5)
    accepted = len(conns)
    per = (after - before) / accepted if accepted and after is not None and before is not None else None
    # A figure at or below zero, or a growth within four times the noise, measured nothing.
    valid = (per is not None and per > 0 and noise is not None
             and (after - before) > 4 * max(noise, 1))
    distinct = sorted(set(errors))
    return {
        "requested": n,
        "accepted": accepted,
        "still_open": still_open,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_client": per,
        "noise_kib": noise,
        "valid": valid,
        "open_seconds": open_s,
        "errors_count": len(errors),
        "errors": distinct[:5],
        "pooler_alive_after": alive(pid),
    }


# --- report ---------------------------------------------------------------------------
def autogroup():
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return "on" if f.read().strip() == "1" else "off"
    except OSError:
        return "not available"


def machine_info():
    lscpu = sh(["lscpu"])
    model = re.search(r"Model name:\s*(.+)", lscpu)
    hyp = re.search(r"Hypervisor vendor:\s*(.+)", lscpu)
    mem = sh(["free", "-h"]).splitlines()
    mem_total = mem[1].split()[1] if len(mem) > 1 else "?"
    return {
        "cpu": model.group(1).strip() if model else platform.processor(),
        "nproc": sh(["nproc"]),
        "hypervisor": hyp.group(1).strip() if hyp else "none",
        "mem": mem_total,
        "kernel": platform.release(),
        "os": sh(["sh", "-c", ". /etc/os-release && echo \"$PRETTY_NAME\""]),
    }


def versions(a):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = sh(["git", "-C", repo, "rev-parse", "--short", "HEAD"]) or "unknown"
    dirty = sh(["git", "-C", repo, "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock"])
    built = a.droid_version or (commit + (" + uncommitted changes in src/ or Cargo.*" if dirty else ""))
    return {
        "droid-pool": built,
        "droid-pool build": a.droid_build or "?",
        "PostgreSQL": sh([os.path.join(a.pg_bin, "postgres"), "--version"]),
        "pgbench": sh([a.pgbench, "--version"]),
        "PgBouncer": sh([a.pgbouncer_bin, "--version"]).splitlines()[0] if sh([a.pgbouncer_bin, "--version"]) else "?",
        "rustc": sh(["rustc", "--version"]),
    }


def evaluate(b: Bench, idle):
    """Computes every figure the report and the targets need."""
    R = {"rows": {}, "c500": {}, "lat1": {}, "idle": idle}
    R["floors"] = {
        floor: {
            "tps": median(b.per_round("floor", floor, "tps")),
            "tps_vs_pgb": median(b.ratio_rounds("floor", floor, "row:select-simple", PGB)),
            "cpu": median(b.per_round("floor", floor, "cpu_us_per_txn")),
            "cpu_vs_pgb": median(b.ratio_rounds("floor", floor, "row:select-simple", PGB, "cpu_us_per_txn")),
            "droid_vs_floor": median(b.ratio_rounds("row:select-simple", DROID, "floor", floor, "cpu_us_per_txn")),
            "errors": b.errors_of(["floor"], floor),
        }
        for floor in b.floors
    }
    R["floor"] = R["floors"][FLOOR]
    for name, label, _extra, systems in b.rows:
        kind = f"row:{name}"
        row = {"label": label, "systems": systems, "tps": {}, "cpu": {}, "errors": {}}
        for s in systems:
            row["tps"][s] = median(b.per_round(kind, s, "tps"))
            row["cpu"][s] = median(b.per_round(kind, s, "cpu_us_per_txn"))
            row["errors"][s] = b.errors_of([kind], s)
        pooler = DROID_TP if DROID_TP in systems else DROID
        row["pooler"] = pooler
        row["ratio_droid_direct"] = median(b.ratio_rounds(kind, pooler, kind, DIRECT))
        if PGB in systems:
            row["ratio_pgb_direct"] = median(b.ratio_rounds(kind, PGB, kind, DIRECT))
            row["ratio_droid_pgb"] = median(b.ratio_rounds(kind, DROID, kind, PGB))
            row["cpu_ratio_droid_pgb"] = median(b.ratio_rounds(kind, DROID, kind, PGB, "cpu_us_per_txn"))
        R["rows"][name] = row
    # Issue 31: pool.session_state track against off (the plain instance), same rounds.
    R["track"] = {}
    for name, label, _extra, systems in b.rows:
        if DROID_TRACK not in systems:
            continue
        kind = f"row:{name}"
        off = [v for v in b.per_round(kind, DROID, "tps") if v]
        R["track"][name] = {
            "label": label,
            "off": median(off),
            "track": median(b.per_round(kind, DROID_TRACK, "tps")),
            "ratio": median(b.ratio_rounds(kind, DROID_TRACK, kind, DROID)),
            "cpu_off": median(b.per_round(kind, DROID, "cpu_us_per_txn")),
            "cpu_track": median(b.per_round(kind, DROID_TRACK, "cpu_us_per_txn")),
            "cpu_ratio": median(b.ratio_rounds(kind, DROID_TRACK, kind, DROID, "cpu_us_per_txn")),
            # How much off's own throughput moved between rounds: the noise a ratio sits in.
            "off_spread": (max(off) / min(off) - 1) if len(off) > 1 else None,
            "errors": b.errors_of([kind], DROID_TRACK),
        }
    R["prepared_vs_extended"] = median(b.ratio_rounds("row:select-prepared", DROID_TP, "row:select-extended", DROID))
    for s in (DROID, PGB):
        R["c500"][s] = {
            "tps": median(b.per_round("c500", s, "tps")),
            "p99": median(b.per_round("c500", s, "p99_ms")),
            "avg": median(b.per_round("c500", s, "latency_avg_ms")),
            "cpu": median(b.per_round("c500", s, "cpu_us_per_txn")),
            "vs50": median(b.ratio_rounds("c500", s, "row:select-simple", s)),
            "errors": b.errors_of(["c500"], s),
        }
    for s in (DIRECT, DROID, PGB):
        R["lat1"][s] = {
            "avg": median(b.per_round("lat1", s, "latency_avg_ms")),
            "p99": median(b.per_round("lat1", s, "p99_ms")),
            "tps": median(b.per_round("lat1", s, "tps")),
            "errors": b.errors_of(["lat1"], s),
        }
        if s != DIRECT:
            R["lat1"][s]["added_avg_us"] = _us(median(b.diff_rounds("lat1", s, DIRECT, "latency_avg_ms")))
            R["lat1"][s]["added_p99_us"] = _us(median(b.diff_rounds("lat1", s, DIRECT, "p99_ms")))
    return R


def _us(ms):
    return None if ms is None else ms * 1000.0


def targets(R, idle_n):
    """(target, measured, result) with result True/False/None (no number)."""
    out = []

    def add(name, value_text, ok):
        out.append((name, value_text, ok))

    def ge(v, t):
        return None if v is None else v >= t

    def le(v, t):
        return None if v is None else v <= t

    for name, label in (("select-simple", "-S simple"), ("select-extended", "-S extended")):
        row = R["rows"][name]
        v = row.get("ratio_droid_pgb")
        add(f"{label}: throughput ≥ 1.15× PgBouncer", f"{fmt(v, '.3f')}×", ge(v, 1.15))
        v = row.get("cpu_ratio_droid_pgb")
        add(f"{label}: CPU/txn ≤ 0.7× PgBouncer",
            f"{fmt(v, '.3f')}× ({fmt(row['cpu'].get(DROID), '.1f')} vs {fmt(row['cpu'].get(PGB), '.1f')} µs)",
            le(v, 0.7))
    v = R["prepared_vs_extended"]
    add("-S prepared (tracking): ≥ 0.95× droid-pool -S extended", f"{fmt(v, '.3f')}×", ge(v, 0.95))
    e = R["rows"]["select-prepared"]["errors"][DROID_TP]
    add("-S prepared (tracking): no failed transaction",
        f"{e['failed_txns']} failed, {e['aborted_clients']} aborted clients, {e['nonzero_exits']} bad exits",
        e["errored_runs"] == 0 if e["runs"] else None)
    v = R["rows"]["tpcb"].get("ratio_droid_pgb")
    add("TPC-B: throughput ≥ 1.0× PgBouncer", f"{fmt(v, '.3f')}×", ge(v, 1.0))
    d, p = R["lat1"][DROID], R["lat1"][PGB]
    ok = None if d["added_avg_us"] is None or p["added_avg_us"] is None else d["added_avg_us"] <= p["added_avg_us"]
    add("1 client: added average latency ≤ PgBouncer's",
        f"{fmt(d['added_avg_us'], '+.1f')} µs vs {fmt(p['added_avg_us'], '+.1f')} µs", ok)
    ok = None if d["added_p99_us"] is None or p["added_p99_us"] is None else d["added_p99_us"] <= p["added_p99_us"]
    add("1 client: added p99 latency ≤ PgBouncer's",
        f"{fmt(d['added_p99_us'], '+.1f')} µs vs {fmt(p['added_p99_us'], '+.1f')} µs", ok)
    i = R["idle"][DROID]
    add(f"idle clients: all {idle_n} accepted", f"{i['accepted']}/{idle_n} (still open: {i['still_open']})",
        i["accepted"] == idle_n and i["still_open"] == idle_n)
    v = i["kib_per_client"]
    # An invalid figure (at or below zero, within the noise) is neither a pass nor a fail.
    add("idle clients: ≤ 2 KiB RSS each", f"{fmt(v, '.2f')} KiB (PgBouncer {fmt(R['idle'][PGB]['kib_per_client'], '.2f')})"
        + ("" if i.get("valid") else f"; INVALID: growth {fmt(v, '.2f')} KiB per client, noise {fmt(i.get('noise_kib'), '.0f')} KiB")
        + (f"; second measurement (the first: {fmt(i['first_attempt']['kib_per_client'], '.2f')} KiB, invalid)"
           if i.get("attempt") == 2 else ""),
        le(v, 2.0) if i.get("valid") else None)
    # Issue 46's line: back at or under 1 KiB. Only a first measurement can pass it: a second
    # one opens its clients into the memory the first one's clients just freed, so it reads
    # low (0.55-0.60 KiB at the smoke run's 1,000 clients where the first read 1.85).
    first = i.get("attempt") != 2
    add("idle clients: ≤ 1 KiB RSS each (issue 46)", f"{fmt(v, '.2f')} KiB"
        + ("" if i.get("valid") else "; INVALID (see the line above)")
        + ("" if first else "; a second measurement, on memory the first freed: not a pass"),
        (le(v, 1.0) and first) if i.get("valid") else None)
    c = R["c500"][DROID]
    add("500 clients: throughput ≥ 0.9× 50-client -S", f"{fmt(c['vs50'], '.3f')}× ({fmt(c['tps'])} tps)", ge(c["vs50"], 0.9))
    e = c["errors"]
    add("500 clients: no client error",
        f"{e['failed_txns']} failed, {e['aborted_clients']} aborted clients, {e['nonzero_exits']} bad exits",
        e["errored_runs"] == 0 if e["runs"] else None)
    return out


def verdict(ok):
    return "PASS" if ok is True else ("FAIL" if ok is False else "NO VALID NUMBER")


def write_chart(R, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(R["rows"].keys())
    labels = [R["rows"][n]["label"].replace(" (default script)", "") for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    x = range(len(names))
    w = 0.38
    d = [R["rows"][n]["ratio_droid_direct"] or 0 for n in names]
    p = [R["rows"][n].get("ratio_pgb_direct") or 0 for n in names]
    b1 = ax1.bar([i - w / 2 for i in x], d, w, label="droid-pool", color="#2a7ab9")
    b2 = ax1.bar([i + w / 2 for i in x], p, w, label="PgBouncer", color="#c9742c")
    ax1.bar_label(b1, labels=[f"{v:.2f}" if v else "" for v in d], fontsize=8)
    ax1.bar_label(b2, labels=[f"{v:.2f}" if v else "–" for v in p], fontsize=8)
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax1.set_xticks(list(x), labels, fontsize=8)
    ax1.set_ylabel("throughput / direct (median of per-round ratios)")
    ax1.set_title("pgbench, 50 clients, pool of 20")
    ax1.legend(fontsize=8)
    dc = [R["rows"][n]["cpu"].get(R["rows"][n]["pooler"]) or 0 for n in names]
    pc = [R["rows"][n]["cpu"].get(PGB) or 0 for n in names]
    c1 = ax2.bar([i - w / 2 for i in x], dc, w, label="droid-pool", color="#2a7ab9")
    c2 = ax2.bar([i + w / 2 for i in x], pc, w, label="PgBouncer", color="#c9742c")
    ax2.bar_label(c1, labels=[f"{v:.1f}" if v else "" for v in dc], fontsize=8)
    ax2.bar_label(c2, labels=[f"{v:.1f}" if v else "–" for v in pc], fontsize=8)
    ax2.set_xticks(list(x), labels, fontsize=8)
    ax2.set_ylabel("pooler CPU µs per transaction (median)")
    ax2.set_title("pooler CPU per transaction (lower is better)")
    ax2.legend(fontsize=8)
    fig.text(0.01, 0.01, "prepared row: droid-pool with --track-prepared; PgBouncer 1.18 has no tracking",
             fontsize=7, color="grey")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pooler_log_summary(path):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return {"lines": 0, "warn_error": 0, "samples": []}
    bad = [ln for ln in lines if re.search(r"\b(WARN|ERROR|error|warning|panicked|FATAL)\b", ln)]
    return {"lines": len(lines), "warn_error": len(bad), "samples": bad[:5]}


def write_report(b: Bench, R, T, idle_n, info, vers, started, finished, load, logs, md_path, png_name):
    L = []
    add = L.append
    smoke = " (SMOKE run: a few seconds per run, 1 round — not a measurement)" if b.smoke else ""
    add(f"# Benchmarks: droid-pool vs PgBouncer vs direct PostgreSQL{smoke}")
    add("")
    add(f"Generated by `bench/run.sh{' --smoke' if b.smoke else ''}` on {started:%Y-%m-%d %H:%M} UTC "
        f"(finished {finished:%H:%M} UTC). Everything below was measured on the same machine in the same run; "
        "nothing is hard-coded. Re-run with `bench/run.sh` (about 20 minutes); the committed copy is the latest full run.")
    add("")
    add(f"![throughput ratios and CPU per transaction]({png_name})")
    add("")
    add("## Machine and versions")
    add("")
    add("| | |")
    add("| --- | --- |")
    add(f"| CPU | {info['cpu']}, {info['nproc']} CPUs (`nproc`), hypervisor {info['hypervisor']} |")
    add(f"| memory | {info['mem']} (`free -h`) |")
    add(f"| OS | {info['os']}, kernel {info['kernel']} |")
    for k, v in vers.items():
        add(f"| {k} | {v} |")
    add(f"| load average before / after | {load[0]} / {load[1]} |")
    measured = [r for r in b.runs if r.kind != "warmup"]
    others = [r.other_cpu_pct for r in measured if r.other_cpu_pct is not None]
    steals = [r.steal_pct for r in measured if r.steal_pct is not None]
    waited = sum(r.waited_s for r in b.runs)
    if others:
        add(f"| CPU used by other processes during runs | median {statistics.median(others):.1f} %, "
            f"max {max(others):.1f} % of the machine (steal: median {statistics.median(steals):.1f} %) |")
    add("")
    add("PostgreSQL, pgbench, both droid-pool instances and PgBouncer share the same CPUs, as they would "
        "in a small pod; so a pooler's CPU per transaction is taken from the machine's throughput. "
        "\"Other processes\" is the machine's busy time (`/proc/stat`) minus what the benchmark's own processes "
        "used (poolers, PostgreSQL and its children, pgbench): work that was not ours and competed for the CPUs. "
        + ("Before each run the harness waits (up to 120 s per run, 20 minutes in all) until other processes use "
           f"less than 15 % of the machine; it waited {waited:.0f} s in all." if not b.smoke else ""))
    if others and max(others) > 10:
        noisy = sorted(measured, key=lambda r: -(r.other_cpu_pct or 0))[:3]
        add("")
        add("**Caution:** some runs shared the machine with other work (up to "
            f"{max(others):.0f} % of it; worst: " + ", ".join(
                f"round {r.round} {r.kind.removeprefix('row:')} {r.system} {r.other_cpu_pct:.0f} %" for r in noisy)
            + "). Their numbers are less reliable; see the last column of \"Every run\".")
    add("")
    add("## Targets (issue 4)")
    add("")
    add("| target | measured | result |")
    add("| --- | --- | --- |")
    for name, value, ok in T:
        add(f"| {name} | {value} | **{verdict(ok)}** |")
    add("")
    add(f"For the CPU lines: a relay that does nothing but forward bytes (see \"The floor\" below) spent "
        f"{fmt(R['floor']['cpu_vs_pgb'], '.3f')}× PgBouncer's CPU per `-S -M simple` transaction in this run"
        + (f"; the same relay over io_uring spent {fmt(R['floors'][FLOOR_URING]['cpu_vs_pgb'], '.3f')}×."
           if FLOOR_URING in R["floors"] else "; the io_uring relay could not run on this machine."))
    add("")
    add(f"## Throughput at 50 clients (`-c 50 -j 2 -T {b.t_row}`), pool of 20, transaction mode")
    add("")
    add(f"Medians over {b.rounds} round(s); each round runs direct, droid-pool, PgBouncer back to back. Ratios are "
        "computed within a round and the median of those per-round ratios is shown. CPU is the pooler "
        "process's utime+stime (`/proc/PID/stat`, all threads) over the run, divided by the transactions pgbench "
        "reports.")
    add("")
    add("| row | direct tps | droid-pool tps | PgBouncer tps | droid-pool / direct | PgBouncer / direct "
        "| droid-pool / PgBouncer | droid-pool CPU µs/txn | PgBouncer CPU µs/txn | CPU droid-pool / PgBouncer |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, row in R["rows"].items():
        p = row["pooler"]
        label = row["label"] + (" ¹" if p == DROID_TP else "")
        add(f"| {label} | {fmt(row['tps'].get(DIRECT))} | {fmt(row['tps'].get(p))} | {fmt(row['tps'].get(PGB), none='–')} "
            f"| {fmt(row['ratio_droid_direct'], '.3f')} | {fmt(row.get('ratio_pgb_direct'), '.3f', '–')} "
            f"| {fmt(row.get('ratio_droid_pgb'), '.3f', '–')} | {fmt(row['cpu'].get(p), '.1f')} "
            f"| {fmt(row['cpu'].get(PGB), '.1f', '–')} | {fmt(row.get('cpu_ratio_droid_pgb'), '.3f', '–')} |")
    add("")
    add(f"¹ droid-pool with `--track-prepared` (a second instance); PgBouncer 1.18 has no prepared-statement "
        f"tracking, so that row is droid-pool vs direct only. Its throughput is "
        f"{fmt(R['prepared_vs_extended'], '.3f')}× droid-pool's own `-S -M extended` (median of per-round ratios).")
    add("")
    add("## `pool.session_state: track` against `off` (issue 31)")
    add("")
    add("A third droid-pool instance, the plain one's flags plus `pool: {session_state: track}`, runs each of "
        "these rows right after the plain one (`off`) in every round. Ratios are per round, then the median; "
        "\"off between rounds\" is how far the plain instance's own throughput moved from round to round "
        "(max / min - 1), the noise a ratio sits in. The instruction counts per transaction "
        "(`bench/callgrind.sh`, docs/performance.md) are the finer measure.")
    add("")
    add("| row | off tps | track tps | track / off | off between rounds | off CPU µs/txn | track CPU µs/txn "
        "| CPU track / off | track errors |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, x in R["track"].items():
        spread = "–" if x["off_spread"] is None else f"{x['off_spread'] * 100:.1f} %"
        add(f"| {x['label']} | {fmt(x['off'])} | {fmt(x['track'])} | {fmt(x['ratio'], '.3f')} | {spread} "
            f"| {fmt(x['cpu_off'], '.1f')} | {fmt(x['cpu_track'], '.1f')} | {fmt(x['cpu_ratio'], '.3f')} "
            f"| {_err_cell(x['errors'])} |")
    add("")
    add("Failed transactions and client errors (all rounds, from pgbench's output):")
    add("")
    add("| row | direct | droid-pool | PgBouncer |")
    add("| --- | --- | --- | --- |")
    for name, row in R["rows"].items():
        cells = []
        for s in (DIRECT, row["pooler"], PGB):
            e = row["errors"].get(s)
            cells.append("–" if e is None else _err_cell(e))
        add(f"| {row['label']} | " + " | ".join(cells) + " |")
    add("")
    add("## The floor: a relay that only forwards bytes")
    add("")
    add("`bench/floor/relay.c` (not part of droid-pool) is one thread with one epoll set that gives every client "
        "its own server connection and forwards bytes as they arrive: one `recv` and one `send` per readiness, "
        "nothing parsed, nothing pooled. Its CPU per transaction is about what relaying over loopback TCP costs in "
        "the kernel, which every relaying pooler pays; a pooler's own work comes on top. It is not a strict bound: "
        "it holds 50 server connections where a pool holds 20, and its epoll is level-triggered. "
        "`bench/floor/uring_relay.c` does the same over io_uring: every receive and send is a ring operation, and "
        "one `io_uring_enter` submits a batch and waits for the next completions, so it asks what a different "
        "transport takes off the floor. Each relay runs the `-S -M simple` row in every round, right after "
        "PgBouncer. Their throughput is not a pooler's: without a pool, PostgreSQL runs 50 backends instead of 20.")
    add("")
    add("| | CPU µs/txn | vs PgBouncer's CPU (same round) | droid-pool's CPU / this | tps | tps vs PgBouncer "
        "(same round) | errors |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for floor, label in ((FLOOR, "minimal relay (epoll)"), (FLOOR_URING, "minimal relay (io_uring)")):
        f = R["floors"].get(floor)
        if f is None:
            add(f"| {label}, `-S -M simple` | not measured: the relay could not start on this machine "
                "| | | | | |")
            continue
        add(f"| {label}, `-S -M simple` | {fmt(f['cpu'], '.1f')} | {fmt(f['cpu_vs_pgb'], '.3f')}× "
            f"| {fmt(f['droid_vs_floor'], '.3f')}× | {fmt(f['tps'])} | {fmt(f['tps_vs_pgb'], '.3f')}× "
            f"| {_err_cell(f['errors'])} |")
    add("")
    add(f"## Added latency at 1 client (`-c 1 -j 1 -T {b.t_lat} -S -M simple --log`)")
    add("")
    add("Average from pgbench's `latency average`; p99 from its per-transaction log. \"Added\" is the "
        "pooler's figure minus direct's in the same round (median over rounds).")
    add("")
    add("| target | tps | latency avg (ms) | p99 (ms) | added avg (µs) | added p99 (µs) | errors |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for s in (DIRECT, DROID, PGB):
        x = R["lat1"][s]
        add(f"| {s} | {fmt(x['tps'])} | {fmt(x['avg'], '.4f')} | {fmt(x['p99'], '.4f')} "
            f"| {fmt(x.get('added_avg_us'), '+.1f', '–')} | {fmt(x.get('added_p99_us'), '+.1f', '–')} | {_err_cell(x['errors'])} |")
    add("")
    add(f"## 500 clients over the same pool of 20 (`-c 500 -j 2 -T {b.t_500} -S`)")
    add("")
    add("Direct is not run: 500 clients exceed `max_connections` 200. p99 comes from pgbench's per-transaction "
        "log sampled at 10 % (`--sampling-rate=0.1`, to keep logging cheap). \"vs 50 clients\" is the 500-client "
        "throughput over the same pooler's 50-client `-S -M simple` throughput in the same round.")
    add("")
    add("| target | tps | vs 50 clients | latency avg (ms) | p99 (ms) | CPU µs/txn | errors |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for s in (DROID, PGB):
        x = R["c500"][s]
        add(f"| {s} | {fmt(x['tps'])} | {fmt(x['vs50'], '.3f')}× | {fmt(x['avg'], '.3f')} | {fmt(x['p99'], '.3f')} "
            f"| {fmt(x['cpu'], '.1f')} | {_err_cell(x['errors'])} |")
    add("")
    add(f"## Memory per idle client ({idle_n:,} idle authenticated connections)")
    add("")
    add("A Python asyncio opener sends each connection a StartupMessage (protocol 3.0, user and database "
        "`postgres`) and reads up to ReadyForQuery, then leaves it idle. RSS is VmRSS from "
        "`/proc/PID/status` before opening and 3 s after the last one was accepted; per client = difference / accepted. "
        "droid-pool's and PgBouncer's rows are measured on processes started for this alone (same flags and files as "
        "the benchmarked ones), which served nothing but a readiness probe: a process that ran the load holds memory "
        "freed and kept by its allocator, which takes idle clients in without growth. The `--track-prepared` row is "
        "the instance that ran the prepared row.")
    add("")
    add("| target | process | accepted | still open at the end | RSS before (KiB) | RSS after (KiB) | KiB per client | noise before (KiB) | valid | open time (s) | errors |")
    add("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for s in (DROID, DROID_TP, PGB):
        x = R["idle"][s]
        errs = "none" if not x["errors_count"] else f"{x['errors_count']}: " + "; ".join(x["errors"])
        process = "fresh" if x.get("fresh") else "after its load"
        if x.get("attempt") == 2:
            process += ", second measurement"
        add(f"| {s} | {process} | {x['accepted']:,} / {x['requested']:,} | {x['still_open']:,} | {fmt(x['rss_before_kib'], ',')} "
            f"| {fmt(x['rss_after_kib'], ',')} | {fmt(x['kib_per_client'], '.2f')} | {fmt(x.get('noise_kib'), ',')} "
            f"| {'yes' if x.get('valid') else 'no (at or below zero, or within 4× the noise)'} | {x['open_seconds']:.1f} | {errs} |")
    add("")
    add("## Setup")
    add("")
    add("- PostgreSQL: `initdb` into a temp dir, defaults except `listen_addresses = '127.0.0.1'` and "
        "`max_connections = 200` (fsync stays on); `pgbench -i -s 10`. Before every run the harness runs, directly "
        "against PostgreSQL, what pgbench's own pre-run vacuum does (`VACUUM pgbench_branches`, `VACUUM "
        "pgbench_tellers`, `TRUNCATE pgbench_history`) plus a `CHECKPOINT`, and pgbench gets `-n`.")
    add("- droid-pool: `target/pgo/droid-pool --port P --server-port PG --pool-size 20 --mode transaction "
        "--config droid-pool.yaml` with `log: {events: false}` and `client: {max_connections: 20000}`. Event lines "
        "are turned off because they are one stdout write per event, several per transaction. The prepared row "
        "uses a second instance with the same flags plus `--track-prepared`; the `session_state: track` rows a third "
        "with the same flags and `pool: {session_state: track}` in its file.")
    add("- PgBouncer: run as the postgres user with `pool_mode = transaction`, `default_pool_size = 20`, "
        "`max_client_conn = 20000`, `auth_type = trust`, `listen_addr = 127.0.0.1`, no unix socket, TLS disabled, "
        "`log_connections = 0`, `log_disconnections = 0`.")
    add("- Minimal relays: `bench/floor/relay.c` built with `cc -O2`, and `bench/floor/uring_relay.c` built with "
        "`cc -O2 -luring` (liburing " + (b.a.liburing or "not installed") + "), each listening on 127.0.0.1 and "
        "connecting each client to PostgreSQL's port.")
    add("- Sessions: PostgreSQL (through `pg_ctl`), the droid-pool instances, PgBouncer and the minimal relay each "
        "run in a session of their own (`setsid`), as daemons and containers do; pgbench runs in the harness's. "
        f"Autogroup scheduling is {autogroup()} on this kernel: with it on, the processes of one session share one "
        "CPU share, so a pooler left in pgbench's session would compete with pgbench for it.")
    add(f"- Warm-up: a {b.t_warm} s `-S` run against every target before round 1 (not reported).")
    add(f"- Open-file limit {b.a.nofile}.")
    add("")
    add("## Commands")
    add("")
    add("Ports are `$PG` (PostgreSQL), `$DP` (droid-pool), `$DPT` (droid-pool --track-prepared), `$PGB` (PgBouncer); "
        "`$PORT` is each of them in turn (and the minimal relays' ports).")
    add("")
    add("```sh")
    add(f"pgbench -h 127.0.0.1 -p $PORT -U postgres -n -c 50 -j 2 -T {b.t_row} -S -M simple postgres      # direct, droid-pool, PgBouncer, minimal relays")
    add(f"pgbench -h 127.0.0.1 -p $PORT -U postgres -n -c 50 -j 2 -T {b.t_row} -S -M extended postgres    # direct, droid-pool, PgBouncer")
    add(f"pgbench -h 127.0.0.1 -p $PORT -U postgres -n -c 50 -j 2 -T {b.t_row} -S -M prepared postgres    # direct, droid-pool --track-prepared")
    add(f"pgbench -h 127.0.0.1 -p $PORT -U postgres -n -c 50 -j 2 -T {b.t_row} postgres                   # TPC-B: direct, droid-pool, PgBouncer")
    add(f"pgbench -h 127.0.0.1 -p $PORT -U postgres -n -c 500 -j 2 -T {b.t_500} -S --log --log-prefix=DIR/pgbench_log --sampling-rate=0.1 postgres")
    add(f"pgbench -h 127.0.0.1 -p $PORT -U postgres -n -c 1 -j 1 -T {b.t_lat} -S -M simple --log --log-prefix=DIR/pgbench_log postgres")
    add("```")
    add("")
    add("## Pooler logs")
    add("")
    for name, s in logs.items():
        add(f"- {name}: {s['lines']} line(s), {s['warn_error']} warning/error line(s)"
            + (": " + "; ".join(f"`{x[:160]}`" for x in s["samples"]) if s["samples"] else "."))
    add("")
    add("## Every run")
    add("")
    add("| round | kind | target | tps | transactions | failed | pooler CPU (s) | CPU µs/txn | latency avg (ms) "
        "| p99 (ms) | exit | other processes' CPU |")
    add("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in b.runs:
        if r.kind == "warmup":
            continue
        add(f"| {r.round} | {r.kind.removeprefix('row:')} | {r.system} | {fmt(r.tps, '.1f')} | {fmt(r.txns, 'd')} "
            f"| {fmt(r.failed, 'd')} | {fmt(r.cpu_s, '.2f', '–')} | {fmt(r.cpu_us_per_txn, '.1f', '–')} "
            f"| {fmt(r.latency_avg_ms, '.3f')} | {fmt(r.p99_ms, '.3f', '–')} | {r.exit_code} "
            f"| {fmt(r.other_cpu_pct, '.1f')} % |")
    add("")
    # Sections other scripts write (bench/unseen.sh) follow a marker and are kept.
    kept = ""
    if os.path.exists(md_path):
        with open(md_path) as f:
            old = f.read()
        at = old.find(KEPT_MARKER)
        if at >= 0:
            kept = old[at:]
    with open(md_path, "w") as f:
        f.write("\n".join(L))
        if kept:
            f.write("\n" + kept)


def _err_cell(e):
    if not e or not e.get("runs"):
        return "–"
    if e["errored_runs"] == 0:
        return "0 failed"
    return (f"{e['failed_txns']} failed, {e['aborted_clients']} aborted clients, "
            f"{e['nonzero_exits']} non-zero exits in {e['errored_runs']}/{e['runs']} runs")


def missing_numbers(R, T):
    missing = [name for name, _v, ok in T if ok is None]
    for name, row in R["rows"].items():
        for s in row["systems"]:
            if row["tps"].get(s) is None:
                missing.append(f"{name} tps {s}")
            if s != DIRECT and row["cpu"].get(s) is None:
                missing.append(f"{name} CPU/txn {s}")
    for floor, f in R["floors"].items():
        if f["cpu"] is None or f["cpu_vs_pgb"] is None:
            missing.append(f"{floor} CPU/txn")
    for s, x in R["c500"].items():
        if x["tps"] is None or x["p99"] is None:
            missing.append(f"500 clients {s}")
    for s, x in R["lat1"].items():
        if x["avg"] is None or x["p99"] is None:
            missing.append(f"1-client latency {s}")
    for s, x in R["idle"].items():
        if x["kib_per_client"] is None:
            missing.append(f"idle RSS {s}")
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-png", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--pgbench", required=True)
    ap.add_argument("--pg-bin", required=True)
    ap.add_argument("--pgbouncer-bin", required=True)
    ap.add_argument("--pg-port", type=int, required=True)
    ap.add_argument("--pg-pid", type=int, required=True, help="postmaster PID")
    ap.add_argument("--droid-port", type=int, required=True)
    ap.add_argument("--droid-pid", type=int, required=True)
    ap.add_argument("--droid-log", required=True)
    ap.add_argument("--droid-tp-port", type=int, required=True)
    ap.add_argument("--droid-tp-pid", type=int, required=True)
    ap.add_argument("--droid-tp-log", required=True)
    ap.add_argument("--droid-track-port", type=int, required=True)
    ap.add_argument("--droid-track-pid", type=int, required=True)
    ap.add_argument("--droid-track-log", required=True)
    ap.add_argument("--pgb-port", type=int, required=True)
    ap.add_argument("--pgb-pid", type=int, required=True)
    ap.add_argument("--pgb-log", required=True)
    ap.add_argument("--droid-idle-port", type=int, required=True, help="a droid-pool that served nothing")
    ap.add_argument("--droid-idle-pid", type=int, required=True)
    ap.add_argument("--pgb-idle-port", type=int, required=True, help="a PgBouncer that served nothing")
    ap.add_argument("--pgb-idle-pid", type=int, required=True)
    ap.add_argument("--floor-port", type=int, required=True)
    ap.add_argument("--floor-pid", type=int, required=True)
    ap.add_argument("--uring-port", type=int, help="the io_uring relay, when run.sh could start it")
    ap.add_argument("--uring-pid", type=int)
    ap.add_argument("--liburing", default="", help="liburing's version, for the report")
    ap.add_argument("--idle-clients", type=int, required=True)
    ap.add_argument("--droid-version", default="", help="the source state the binary was built from")
    ap.add_argument("--droid-build", default="", help="how the binary was built (scripts/build-pgo.sh)")
    ap.add_argument("--nofile", required=True)
    a = ap.parse_args()

    started = dt.datetime.now(dt.timezone.utc)
    load_before = open("/proc/loadavg").read().split()[:3]
    b = Bench(a)
    print(f"bench: {'smoke' if a.smoke else 'full'} run, {b.rounds} round(s), CLK_TCK {CLK_TCK}", flush=True)
    b.warmup()
    for rnd in range(1, b.rounds + 1):
        b.round(rnd)
    idle = b.idle()
    finished = dt.datetime.now(dt.timezone.utc)
    load_after = open("/proc/loadavg").read().split()[:3]

    R = evaluate(b, idle)
    T = targets(R, a.idle_clients)
    logs = {DROID: pooler_log_summary(a.droid_log), DROID_TP: pooler_log_summary(a.droid_tp_log),
            DROID_TRACK: pooler_log_summary(a.droid_track_log),
            PGB: pooler_log_summary(a.pgb_log)}
    alive_now = {DROID: alive(a.droid_pid), DROID_TP: alive(a.droid_tp_pid),
                 DROID_TRACK: alive(a.droid_track_pid), PGB: alive(a.pgb_pid),
                 FLOOR: alive(a.floor_pid), f"{DROID} (fresh)": alive(a.droid_idle_pid),
                 f"{PGB} (fresh)": alive(a.pgb_idle_pid)}
    if a.uring_pid is not None:
        alive_now[FLOOR_URING] = alive(a.uring_pid)
    os.makedirs(os.path.dirname(os.path.abspath(a.out_md)), exist_ok=True)
    write_chart(R, a.out_png)
    write_report(b, R, T, a.idle_clients, machine_info(), versions(a), started, finished,
                 (" ".join(load_before), " ".join(load_after)), logs, a.out_md, os.path.basename(a.out_png))
    with open(os.path.join(a.work_dir, "results.json"), "w") as f:
        json.dump({"runs": [asdict(r) for r in b.runs], "idle": idle}, f, indent=1, default=str)

    print()
    print("targets (issue 4)" + (" — SMOKE run: numbers are not a measurement" if a.smoke else ""))
    width = max(len(n) for n, _v, _ok in T)
    for name, value, ok in T:
        print(f"  {verdict(ok):<9} {name:<{width}}  {value}")
    for name, is_alive in alive_now.items():
        if not is_alive:
            print(f"bench: {name} is no longer running", file=sys.stderr)
    for name, s in logs.items():
        if s["warn_error"]:
            print(f"bench: {name} log has {s['warn_error']} warning/error line(s), e.g. {s['samples'][:2]}",
                  file=sys.stderr)

    missing = missing_numbers(R, T)
    if a.smoke:
        # A smoke run's 1,000 idle clients add well under a megabyte, close to what the
        # allocator's own movements can hide: its per-client figure may be invalid.
        # That is reported (NO VALID NUMBER, never a pass) but does not fail the smoke, which
        # checks that every measurement runs; a figure that could not be read at all still does.
        waived = [m for m in missing if m.startswith("idle clients: ≤")]
        for m in waived:
            print(f"bench: smoke run: no valid number for '{m}' (not a pass, not fatal in a smoke run)",
                  file=sys.stderr)
        missing = [m for m in missing if m not in waived]
    if missing:
        print(f"bench: no number for: {', '.join(missing)}", file=sys.stderr)
        return 1
    if not all(alive_now.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
