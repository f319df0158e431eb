"""Shared bits of the Python driver tests (run by scripts/driver-tests.sh)."""

import argparse
import sys
import threading

CLIENTS = 20
ROUNDS = 100


def parse_args(driver):
    p = argparse.ArgumentParser(description=f"{driver} through droid-pool")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--table", required=True, help="table of this run (created here)")
    p.add_argument("--clients", type=int, default=CLIENTS)
    p.add_argument("--rounds", type=int, default=ROUNDS)
    return p.parse_args()


class Checks:
    """Counts every checked answer; keeps the first failures with their client."""

    def __init__(self, driver):
        self.driver = driver
        self.lock = threading.Lock()
        self.passed = 0
        self.failed = 0
        self.messages = []

    def eq(self, client, what, got, want):
        with self.lock:
            if got == want:
                self.passed += 1
            else:
                self.failed += 1
                if len(self.messages) < 50:
                    self.messages.append(f"client {client}: {what}: got {got!r}, want {want!r}")

    def error(self, client, what, exc):
        with self.lock:
            self.failed += 1
            if len(self.messages) < 50:
                self.messages.append(f"client {client}: {what}: {type(exc).__name__}: {exc}")

    def finish(self):
        for m in self.messages:
            print(f"FAIL {m}", file=sys.stderr)
        # The plain closing line: "<driver>: N passed, N failed".
        print(f"{self.driver}: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 and self.passed > 0 else 1
