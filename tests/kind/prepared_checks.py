#!/usr/bin/env python3
"""The prepared-statement stage checks, over the wire, against a droid-pool pooler that runs
somewhere else (a kind cluster, reached through `kubectl port-forward`).

  prepared_checks.py --host 127.0.0.1 --port 16432 --user app --database app

The pooler must run in transaction mode with track_prepared on, a pool size of 2 and trust
authentication for the client (tests/kind/manifests/). The checks are those of the contract's
checklist (tests/it/prepared.rs has the same ones against a local pooler, with its event lines):
  prepared-statement-tracked  a statement parsed on one server works on another one
  names-do-not-collide        two clients' "p" side by side on one server
  close-tracked               a closed statement is gone for its client only (26000)
  sql-prepare-not-tracked     SQL PREPARE is left alone: EXECUTE elsewhere fails with 26000
Only the standard library: it runs wherever python3 does. Exit 1 on the first failed check.
"""
import argparse
import os
import socket
import struct
import sys
import time
import uuid

# The pooler releases a server just after ReadyForQuery: let that happen (seconds).
SETTLE = float(os.environ.get("PREPARED_CHECKS_SETTLE", "0.5"))


class Conn:
    """One client connection speaking protocol 3.0 with raw messages."""

    def __init__(self, args):
        self.sock = socket.create_connection((args.host, args.port), timeout=10)
        params = f"user\0{args.user}\0database\0{args.database}\0\0".encode()
        self.sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        for tag, body in self.until_ready():
            if tag == "R" and struct.unpack("!i", body[:4])[0] != 0:
                raise SystemExit("the pooler asked for a password: the checks need trust auth")
            if tag == "E":
                raise SystemExit(f"login failed: {fields(body)}")

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise SystemExit("the pooler closed the connection")
            buf += chunk
        return buf

    def until_ready(self):
        frames = []
        while True:
            tag, length = struct.unpack("!ci", self.recv_exact(5))
            body = self.recv_exact(length - 4)
            frames.append((tag.decode(), body))
            if tag == b"Z":
                return frames

    def send(self, *msgs):
        self.sock.sendall(b"".join(msgs))
        return Reply(self.until_ready())

    def simple(self, sql):
        return self.send(msg("Q", cstr(sql)))


def msg(tag, body=b""):
    return tag.encode() + struct.pack("!i", len(body) + 4) + body


def cstr(s):
    return s.encode() + b"\0"


def parse(name, sql):
    return msg("P", cstr(name) + cstr(sql) + struct.pack("!h", 0))


def bind(stmt, params=()):
    body = cstr("") + cstr(stmt) + struct.pack("!hh", 0, len(params))
    for p in params:
        body += struct.pack("!i", len(p)) + p.encode()
    return msg("B", body + struct.pack("!h", 0))


def execute():
    return msg("E", cstr("") + struct.pack("!i", 0))


def close_stmt(name):
    return msg("C", b"S" + cstr(name))


def sync():
    return msg("S")


def fields(body):
    out = {}
    for part in body.split(b"\0"):
        if part:
            out[chr(part[0])] = part[1:].decode(errors="replace")
    return out


class Reply:
    def __init__(self, frames):
        self.frames = frames
        self.tags = "".join(t for t, _ in frames if t not in "NS")  # notices, parameter status
        self.status = frames[-1][1].decode()
        self.errors = [fields(b)["C"] for t, b in frames if t == "E"]
        self.col0 = []
        for t, b in frames:
            if t == "D":
                (n,) = struct.unpack("!h", b[:2])
                if n:
                    (ln,) = struct.unpack("!i", b[2:6])
                    self.col0.append(None if ln < 0 else b[6:6 + ln].decode())

    def __repr__(self):
        return f"tags={self.tags} status={self.status} errors={self.errors} rows={self.col0}"


def expect(what, cond, reply):
    if not cond:
        raise AssertionError(f"{what}: got {reply}")


def prepared_statement_tracked(a):
    c1, c2 = Conn(a), Conn(a)
    r = c1.send(parse("p", "select $1::int * 2"), sync())
    expect("c1 Parse p", r.tags == "1Z", r)
    time.sleep(SETTLE)
    r = c2.simple("BEGIN")  # c2 now holds the server c1 parsed p on
    expect("c2 BEGIN", r.status == "T", r)
    r = c1.send(bind("p", ["21"]), execute(), sync())  # on the other server: replayed
    expect("c1 Bind p on another server", r.tags == "2DCZ" and r.col0 == ["42"], r)
    r = c2.simple("COMMIT")
    expect("c2 COMMIT", r.tags == "CZ" and r.status == "I", r)


def names_do_not_collide(a):
    c1, c2 = Conn(a), Conn(a)
    r = c1.send(parse("p", "select 'one'::text"), sync())
    expect("c1 Parse p", r.tags == "1Z", r)
    time.sleep(SETTLE)
    r = c2.send(parse("p", "select 'two'::text"), sync())
    expect("c2 Parse p (no 42P05)", r.tags == "1Z", r)
    time.sleep(SETTLE)
    expect("c1 begin", c1.simple("begin").status == "T", r)
    r = c1.send(bind("p"), execute(), sync())
    expect("c1 p answers one", r.tags == "2DCZ" and r.col0 == ["one"], r)
    expect("c1 commit", c1.simple("commit").status == "I", r)
    r = c2.send(bind("p"), execute(), sync())
    expect("c2 p answers two", r.tags == "2DCZ" and r.col0 == ["two"], r)


def close_tracked(a):
    c1, c2 = Conn(a), Conn(a)
    expect("c1 Parse p", c1.send(parse("p", "select 'one'::text"), sync()).tags == "1Z", "")
    expect("c2 Parse p", c2.send(parse("p", "select 'two'::text"), sync()).tags == "1Z", "")
    time.sleep(SETTLE)
    r = c1.send(close_stmt("p"), sync())
    expect("c1 Close p", r.tags == "3Z" and r.status == "I", r)
    r = c1.send(bind("p"), execute(), sync())
    expect("c1 p is gone (26000)", r.tags == "EZ" and r.errors == ["26000"], r)
    r = c1.simple("select 5")
    expect("c1 session goes on", r.tags == "TDCZ" and r.col0 == ["5"], r)
    r = c2.send(bind("p"), execute(), sync())
    expect("c2 p still there", r.tags == "2DCZ" and r.col0 == ["two"], r)
    r = c1.send(parse("p", "select 'three'::text"), bind("p"), execute(), sync())
    expect("c1 parses p again", r.tags == "12DCZ" and r.col0 == ["three"], r)


def sql_prepare_not_tracked(a):
    name = "s_" + uuid.uuid4().hex[:8]  # SQL statements outlive the check on the server
    c1 = Conn(a)
    r = c1.simple(f"PREPARE {name} AS select 7")
    expect("c1 PREPARE", r.tags == "CZ", r)
    time.sleep(SETTLE)
    c2 = Conn(a)
    expect("c2 begin", c2.simple("begin").status == "T", "")
    r = c1.simple(f"EXECUTE {name}")  # on the other server, where it was never prepared
    expect("c1 EXECUTE elsewhere fails (26000)", r.tags == "EZ" and r.errors == ["26000"], r)
    r = c2.simple(f"EXECUTE {name}")  # the server it was prepared on still has it
    expect("c2 EXECUTE on that server", r.tags == "TDCZ" and r.col0 == ["7"], r)
    expect("c2 commit", c2.simple("commit").status == "I", "")


CHECKS = [
    ("prepared-statement-tracked", prepared_statement_tracked),
    ("names-do-not-collide", names_do_not_collide),
    ("close-tracked", close_tracked),
    ("sql-prepare-not-tracked", sql_prepare_not_tracked),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", default="app")
    ap.add_argument("--database", default="app")
    args = ap.parse_args()
    failed = 0
    for name, check in CHECKS:
        try:
            check(args)
            print(f"PASS {name}")
        except (AssertionError, OSError) as e:
            print(f"FAIL {name}: {e}")
            failed += 1
    print(f"{len(CHECKS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
