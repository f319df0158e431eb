// node-postgres named queries through droid-pool (run by scripts/driver-tests.sh).
//
// 20 concurrent clients, each running named prepared statements ({ name, text, values }) many
// times in and out of transactions, with rollbacks and a fresh name each few rounds. Every
// answer is checked; the exit status is non-zero on any failure.
//
//   node node_pg.js --port 6432 --table drv_node [--host 127.0.0.1] [--user postgres]
//                   [--dbname postgres] [--clients 20] [--rounds 100]

'use strict';

const { Client } = require('pg');

function parseArgs(argv) {
  const a = {
    host: '127.0.0.1',
    port: 0,
    user: 'postgres',
    dbname: 'postgres',
    table: '',
    clients: 20,
    rounds: 100,
  };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in a) || i + 1 >= argv.length) {
      throw new Error(`unknown or incomplete argument ${argv[i]}`);
    }
    a[key] = typeof a[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!a.port || !a.table) {
    throw new Error('--port and --table are required');
  }
  return a;
}

const args = parseArgs(process.argv);
let passed = 0;
let failed = 0;
const messages = [];

function eq(client, what, got, want) {
  if (JSON.stringify(got) === JSON.stringify(want)) {
    passed += 1;
  } else {
    failed += 1;
    if (messages.length < 50) {
      messages.push(`client ${client}: ${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    }
  }
}

function connect() {
  return new Client({ host: args.host, port: args.port, user: args.user, database: args.dbname });
}

async function one(c, name, text, values) {
  const res = await c.query({ name, text, values });
  return res.rows[0];
}

async function client(i) {
  const ins = `insert into ${args.table} (client, n) values ($1, $2) returning n`;
  const c = connect();
  let committed = 0;
  try {
    await c.connect();
    for (let r = 0; r < args.rounds; r += 1) {
      switch (r % 5) {
        case 0: {
          await c.query('BEGIN');
          eq(i, 'add in transaction', (await one(c, 'add', 'select $1::int + $2::int as v', [i, r])).v, i + r);
          eq(i, 'insert in transaction', (await one(c, 'ins', ins, [i, r])).n, r);
          await c.query('COMMIT');
          committed += 1;
          break;
        }
        case 1: {
          const echo = await one(c, 'echo', "select $1::text || '/' || $2::text as v", [`c${i}`, String(r)]);
          eq(i, 'echo', echo.v, `c${i}/${r}`);
          eq(i, 'insert', (await one(c, 'ins', ins, [i, r])).n, r);
          committed += 1;
          break;
        }
        case 2: {
          // A fresh name (and text) each time, then the long-lived ones again.
          const fresh = await one(c, `fresh${r}`, `select ${i} * 1000 + $1::int as v`, [r]);
          eq(i, 'fresh statement', fresh.v, i * 1000 + r);
          eq(i, 'add', (await one(c, 'add', 'select $1::int + $2::int as v', [r, r])).v, 2 * r);
          break;
        }
        case 3: {
          // Unnamed and named statements mixed, outside a transaction.
          const a = (await c.query('select $1::int + $2::int as v', [r, 1])).rows[0];
          const b = await one(c, 'echo', "select $1::text || '/' || $2::text as v", ['q', String(r)]);
          const n = await one(c, 'ins', ins, [i, r]);
          eq(i, 'unnamed add', a.v, r + 1);
          eq(i, 'echo again', b.v, `q/${r}`);
          eq(i, 'insert again', n.n, r);
          committed += 1;
          break;
        }
        default: {
          await c.query('BEGIN');
          eq(i, 'insert to roll back', (await one(c, 'ins', ins, [i, r])).n, r);
          await c.query('ROLLBACK');
        }
      }
    }
    const count = await one(c, 'count', `select count(*)::int as n from ${args.table} where client = $1`, [i]);
    eq(i, 'rows committed', count.n, committed);
  } catch (err) {
    failed += 1;
    if (messages.length < 50) {
      messages.push(`client ${i}: exception: ${err.code || ''} ${err.message}`);
    }
  } finally {
    await c.end().catch(() => {});
  }
}

async function main() {
  const admin = connect();
  await admin.connect();
  await admin.query(`drop table if exists ${args.table}`);
  await admin.query(`create table ${args.table} (client int, n int)`);
  await admin.end();
  const clients = [];
  for (let i = 0; i < args.clients; i += 1) {
    clients.push(client(i));
  }
  await Promise.all(clients);
  for (const m of messages) {
    console.error(`FAIL ${m}`);
  }
  // The plain closing line: "<driver>: N passed, N failed".
  console.log(`node-postgres: ${passed} passed, ${failed} failed`);
  process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
}

main().catch((err) => {
  console.error(`FAIL ${err.stack || err}`);
  process.exitCode = 1;
});
