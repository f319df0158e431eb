"""asyncpg through droid-pool: every query asyncpg runs is a named prepared statement.

20 concurrent clients (one asyncio task each) with explicit prepared statements, the statement
cache (kept small so that asyncpg closes old statements), transactions committed and rolled
back, and executemany (a pipeline of Bind/Execute). Every answer is checked; the exit status is
non-zero on any failure.
"""

import asyncio
import sys

import asyncpg

from common import Checks, parse_args

args = parse_args("asyncpg")
checks = Checks("asyncpg")


async def client(i):
    ins = f"insert into {args.table} (client, n) values ($1, $2) returning n"
    committed = 0
    try:
        conn = await asyncpg.connect(
            host=args.host,
            port=args.port,
            user=args.user,
            database=args.dbname,
            statement_cache_size=8,
        )
        try:
            add = await conn.prepare("select $1::int + $2::int")
            for r in range(args.rounds):
                kind = r % 5
                if kind == 0:
                    async with conn.transaction():
                        checks.eq(i, "add in transaction", await add.fetchval(i, r), i + r)
                        checks.eq(i, "insert in transaction", await conn.fetchval(ins, i, r), r)
                    committed += 1
                elif kind == 1:
                    got = await conn.fetchval("select $1::text || '/' || $2::text", f"c{i}", str(r))
                    checks.eq(i, "echo", got, f"c{i}/{r}")
                    checks.eq(i, "prepared add", await add.fetchval(r, 1), r + 1)
                    checks.eq(i, "insert", await conn.fetchval(ins, i, r), r)
                    committed += 1
                elif kind == 2:
                    # A new statement text each round: the small cache closes old ones.
                    got = await conn.fetchval(f"select {i} * 1000 + $1::int + 0 * {r}", r)
                    checks.eq(i, "fresh statement", got, i * 1000 + r)
                    row = await conn.fetchrow("select $1::int as a, $2::text as b", r, "x")
                    checks.eq(i, "fetchrow", (row["a"], row["b"]), (r, "x"))
                elif kind == 3:
                    await conn.executemany(
                        f"insert into {args.table} (client, n) values ($1, $2)",
                        [(i, 1000 + r * 10 + k) for k in range(5)],
                    )
                    committed += 5
                else:
                    tr = conn.transaction()
                    await tr.start()
                    checks.eq(i, "insert to roll back", await conn.fetchval(ins, i, r), r)
                    await tr.rollback()
            got = await conn.fetchval(
                f"select count(*) from {args.table} where client = $1", i
            )
            checks.eq(i, "rows committed", got, committed)
        finally:
            await conn.close()
    except Exception as exc:  # noqa: BLE001 - every failure is reported
        checks.error(i, "exception", exc)


async def run():
    conn = await asyncpg.connect(
        host=args.host, port=args.port, user=args.user, database=args.dbname
    )
    await conn.execute(f"drop table if exists {args.table}")
    await conn.execute(f"create table {args.table} (client int, n int)")
    await conn.close()
    await asyncio.gather(*(client(i) for i in range(args.clients)))


def main():
    asyncio.run(run())
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
