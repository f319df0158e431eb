'use strict'
// Preloaded (`node -r`) into each of node-postgres's integration test files by
// scripts/driver-suites.sh (SUITE=node-postgres). The suite's own runner (packages/pg/test/
// suite.js) only prints "name ✔" or "name FAILED!" and exits at the first failure, and test
// output interleaves with it, so the names are not reliably recoverable from stdout. This wraps
// Suite#run and appends one JSON line per event to $SUITE_REPORT: a start, then an end with the
// error if any (a start with no end is a test the process died in: a timeout or an uncaught
// exception). Nothing else about the suite changes.
const fs = require('fs')

const report = process.env.SUITE_REPORT
const Suite = require(process.env.SUITE_JS)

const note = (record) => fs.appendFileSync(report, JSON.stringify(record) + '\n')

const run = Suite.prototype.run
Suite.prototype.run = function (test, cb) {
  if (!test.action) {
    note({ t: 'skip', name: test.name })
    return run.call(this, test, cb)
  }
  const testRun = test.run.bind(test)
  test.run = (done) => {
    note({ t: 'start', name: test.name })
    testRun((err) => {
      note({ t: 'end', name: test.name, err: err ? String((err && err.stack) || err).slice(0, 4000) : null })
      done(err)
    })
  }
  return run.call(this, test, cb)
}
