#!/usr/bin/env python3
"""Writes the hand-made seed inputs under fuzz/corpus/<target>/seed-*.

Each target reads one or two leading selector bytes before the protocol bytes (see the doc
comment at the top of fuzz_targets/<target>.rs); the seeds follow that layout. Re-run after
changing a target's input layout: `python3 fuzz/make_corpus.py`.
"""

import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

PROTOCOL_3_0 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102


def cstr(s: bytes) -> bytes:
    return s + b"\0"


def msg(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack(">I", len(body) + 4) + body


def startup(params) -> bytes:
    body = struct.pack(">i", PROTOCOL_3_0)
    for k, v in params:
        body += cstr(k) + cstr(v)
    body += b"\0"
    return struct.pack(">I", len(body) + 4) + body


def parse_body(name: bytes, sql: bytes, oids) -> bytes:
    return cstr(name) + cstr(sql) + struct.pack(">h", len(oids)) + b"".join(
        struct.pack(">i", o) for o in oids
    )


def bind_body(portal: bytes, name: bytes, params) -> bytes:
    b = cstr(portal) + cstr(name) + struct.pack(">h", 0) + struct.pack(">h", len(params))
    for p in params:
        b += struct.pack(">i", -1) if p is None else struct.pack(">i", len(p)) + p
    return b + struct.pack(">h", 0)


PARSE = parse_body(b"s1", b"select $1::int", [23])
BIND = bind_body(b"", b"s1", [b"42", None])
SSL = struct.pack(">Ii", 8, SSL_REQUEST)
GSSENC = struct.pack(">Ii", 8, GSSENC_REQUEST)
CANCEL = struct.pack(">Iiii", 16, CANCEL_REQUEST, 1234, 5678)
STARTUP = startup([(b"user", b"droid"), (b"database", b"droid"), (b"application_name", b"psql")])

SEEDS = {
    # [max selector (max = 4*b), chunk selector] + stream
    "frame": {
        "seed-extended-query": bytes([255, 7])
        + msg(b"P", PARSE)
        + msg(b"B", BIND)
        + msg(b"D", b"P\0")
        + msg(b"E", b"\0" + struct.pack(">i", 0))
        + msg(b"S", b""),
        "seed-simple-query": bytes([64, 1]) + msg(b"Q", cstr(b"select 1")) + msg(b"X", b""),
        "seed-partial": bytes([64, 3]) + msg(b"Q", cstr(b"select 1"))[:9],
        "seed-too-large": bytes([4, 5]) + msg(b"Q", cstr(b"select 1") * 4),
        "seed-bad-length": bytes([255, 2]) + b"Q\0\0\0\x03",
    },
    # [max_len selector (8 + 8*b), max_params selector (b % 16)] + stream
    "startup": {
        "seed-startup": bytes([128, 8]) + STARTUP,
        "seed-ssl-then-startup": bytes([128, 8]) + SSL + STARTUP,
        "seed-gssenc": bytes([128, 8]) + GSSENC,
        "seed-cancel": bytes([16, 0]) + CANCEL,
        "seed-minor-grease": bytes([128, 8])
        + STARTUP[:4]
        + struct.pack(">i", PROTOCOL_3_0 + 0xFFFF)
        + STARTUP[8:],
        "seed-too-many-params": bytes([128, 1]) + STARTUP,
    },
    # [tag selector (b % 8: P B D C Q, else the byte itself; b / 8 = new name length)] + body
    "frontend_msgs": {
        "seed-parse": bytes([0 + 8 * 3]) + PARSE,
        "seed-parse-unnamed": bytes([0 + 8 * 5]) + parse_body(b"", b"select 1", []),
        "seed-bind": bytes([1 + 8 * 6]) + BIND,
        "seed-describe-statement": bytes([2 + 8 * 2]) + b"S" + cstr(b"s1"),
        "seed-close-portal": bytes([3 + 8 * 1]) + b"P" + cstr(b"p1"),
        "seed-query": bytes([4]) + cstr(b"select 1"),
    },
}


# sim: a setup byte, the schedule's seed, then the generator's choices (fixed pseudo-random
# bytes, so every setup starts from a program of several clients and pieces).
_rng = random.Random(7)
SEEDS["sim"] = {
    f"seed-setup{i}": bytes([i]) + bytes(_rng.randrange(256) for _ in range(8 + 200))
    for i in range(6)
}


def main() -> None:
    for target, seeds in SEEDS.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"{d}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
