// node-postgres's own quick-disconnect test, through droid-pool (run by
// scripts/driver-tests.sh): `connect()` then `end()` in the same tick sends Terminate before
// the StartupMessage. PostgreSQL closes such a connection without a reply; a reply the
// driver did not expect surfaces as an unhandled rejection, which ends the process. Five
// tries; the exit status is non-zero if any rejection went unhandled or a try hung.
//
//   node node_quick_disconnect.js --port 6432 [--host 127.0.0.1] [--user postgres]
//                                 [--dbname postgres] [--tries 5]

'use strict';

const { Client } = require('pg');

const a = { host: '127.0.0.1', port: 0, user: 'postgres', dbname: 'postgres', tries: 5 };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in a) || i + 1 >= process.argv.length) {
    throw new Error(`unknown or incomplete argument ${process.argv[i]}`);
  }
  a[key] = typeof a[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}

let unhandled = 0;
process.on('unhandledRejection', (e) => {
  unhandled += 1;
  console.error(`FAIL unhandled rejection: ${e && e.stack ? e.stack : e}`);
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  for (let t = 0; t < a.tries; t += 1) {
    const client = new Client({ host: a.host, port: a.port, user: a.user, database: a.dbname });
    // As the driver's test does: neither promise is awaited or caught.
    client.connect();
    client.end();
    await sleep(300);
  }
  // A normal client still works afterwards.
  const c = new Client({ host: a.host, port: a.port, user: a.user, database: a.dbname });
  await c.connect();
  const r = await c.query('select 1 as one');
  await c.end();
  if (r.rows[0].one !== 1) {
    throw new Error('select 1 answered wrong');
  }
  console.log(`node-postgres quick-disconnect: ${a.tries} tries, ${unhandled} unhandled rejections`);
  process.exit(unhandled === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error(`FAIL ${e.stack || e}`);
  process.exit(1);
});
