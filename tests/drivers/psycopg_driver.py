"""psycopg 3 with prepare_threshold=0 (every query a named prepared statement) through droid-pool.

20 concurrent clients (threads), each running prepared statements many times in and out of
transactions, in pipeline mode, with a small prepared_max so that psycopg closes old statements
(protocol Close) and with rollbacks (after which psycopg sends DEALLOCATE ALL). Every answer is
checked; the exit status is non-zero on any failure.
"""

import sys
import threading

import psycopg

from common import Checks, parse_args

args = parse_args("psycopg")
checks = Checks("psycopg")


def connect(autocommit):
    conn = psycopg.connect(
        host=args.host,
        port=args.port,
        user=args.user,
        dbname=args.dbname,
        autocommit=autocommit,
        prepare_threshold=0,
    )
    # Few statements kept by psycopg: older ones are closed (Close S) and made again.
    conn.prepared_max = 6
    return conn


def client(i):
    autocommit = i % 2 == 0
    ins = f"insert into {args.table} (client, n) values (%s, %s) returning n"
    committed = 0
    try:
        with connect(autocommit) as conn:
            for r in range(args.rounds):
                kind = r % 5
                if kind == 0:
                    with conn.transaction():
                        got = conn.execute("select %s::int + %s::int", (i, r)).fetchone()[0]
                        checks.eq(i, "add in transaction", got, i + r)
                        got = conn.execute(ins, (i, r)).fetchone()[0]
                        checks.eq(i, "insert in transaction", got, r)
                    committed += 1
                elif kind == 1:
                    got = conn.execute("select %s::text || '/' || %s::text", (f"c{i}", str(r))).fetchone()[0]
                    checks.eq(i, "echo", got, f"c{i}/{r}")
                    got = conn.execute(ins, (i, r)).fetchone()[0]
                    checks.eq(i, "insert", got, r)
                    committed += 1
                elif kind == 2:
                    # A new statement text each round: psycopg prepares it, and closes old ones.
                    got = conn.execute(f"select {i} * 1000 + %s::int + 0 * {r}", (r,)).fetchone()[0]
                    checks.eq(i, "fresh statement", got, i * 1000 + r)
                elif kind == 3:
                    with conn.pipeline():
                        a = conn.execute("select %s::int + %s::int", (r, r))
                        b = conn.execute("select %s::text || '/' || %s::text", ("p", str(r)))
                        c = conn.execute(ins, (i, r))
                    checks.eq(i, "pipeline add", a.fetchone()[0], 2 * r)
                    checks.eq(i, "pipeline echo", b.fetchone()[0], f"p/{r}")
                    checks.eq(i, "pipeline insert", c.fetchone()[0], r)
                    committed += 1
                else:
                    # Rolled back: nothing committed; psycopg then drops its statements
                    # (DEALLOCATE ALL) and prepares them again.
                    conn.execute("begin" if autocommit else "select 1")
                    got = conn.execute(ins, (i, r)).fetchone()[0]
                    checks.eq(i, "insert to roll back", got, r)
                    conn.execute("rollback")
                if not autocommit:
                    conn.commit()
            got = conn.execute(
                f"select count(*) from {args.table} where client = %s", (i,)
            ).fetchone()[0]
            checks.eq(i, "rows committed", got, committed)
            if not autocommit:
                conn.commit()
    except Exception as exc:  # noqa: BLE001 - every failure is reported
        checks.error(i, "exception", exc)


def main():
    with psycopg.connect(
        host=args.host, port=args.port, user=args.user, dbname=args.dbname, autocommit=True
    ) as conn:
        conn.execute(f"drop table if exists {args.table}")
        conn.execute(f"create table {args.table} (client int, n int)")
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
