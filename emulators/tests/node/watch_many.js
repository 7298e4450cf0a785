// Watches many documents and a few queries with one instance of Google's Node
// Firestore client, then updates every document through that same instance
// and waits until every listener has seen its change.
//
// Usage: FIRESTORE_EMULATOR_HOST=127.0.0.1:PORT node watch_many.js DOCS QUERIES
// Exits 0 with one "ok" line; 1 naming the phase that did not finish within
// WATCH_MANY_DEADLINE_MS (default 45000) and how far it got.
'use strict';

const { Firestore } = require('@google-cloud/firestore');

const docCount = Number(process.argv[2] ?? 200);
const queryCount = Number(process.argv[3] ?? 3);
const deadlineMs = Number(process.env.WATCH_MANY_DEADLINE_MS ?? 45000);
const started = Date.now();
let phase = 'start';
let progress = () => '';

function fail(message) {
  console.error(`FAILED in phase "${phase}" after ${Date.now() - started} ms: ${message}`);
  process.exit(1);
}

const deadline = setTimeout(
  () => fail(`not done within ${deadlineMs} ms (${progress()})`),
  deadlineMs,
);

// Resolves once `done()` holds; checked after every snapshot.
function waitFor(done) {
  return new Promise((resolve) => {
    const check = () => {
      if (done()) {
        waiters.delete(check);
        resolve();
      }
    };
    waiters.add(check);
    check();
  });
}
const waiters = new Set();
const wake = () => {
  for (const check of [...waiters]) check();
};

async function main() {
  if (!process.env.FIRESTORE_EMULATOR_HOST) fail('FIRESTORE_EMULATOR_HOST is not set');
  const db = new Firestore({ projectId: 'watch-many' });
  const coll = db.collection(`watched-${process.pid}-${Date.now()}`);
  const refs = [];
  for (let i = 0; i < docCount; i++) refs.push(coll.doc(`d${String(i).padStart(5, '0')}`));

  phase = 'create';
  for (let i = 0; i < refs.length; i += 500) {
    const batch = db.batch();
    refs.slice(i, i + 500).forEach((ref, j) => batch.set(ref, { n: 0, bucket: (i + j) % queryCount }));
    await batch.commit();
  }

  // What each listener has seen: a document's last `n`, a query's n by id.
  phase = 'listen';
  const docSeen = new Array(docCount).fill(undefined);
  const querySeen = [];
  const unsubscribes = [];
  refs.forEach((ref, i) => {
    unsubscribes.push(
      ref.onSnapshot(
        (snap) => {
          docSeen[i] = snap.exists ? snap.get('n') : null;
          wake();
        },
        (err) => fail(`document listener ${ref.id}: ${err}`),
      ),
    );
  });
  const queries = [];
  for (let b = 0; b < queryCount; b++) queries.push(coll.where('bucket', '==', b));
  queries.push(coll.where('n', '>=', 0)); // every document
  queries.forEach((query, q) => {
    querySeen[q] = new Map();
    unsubscribes.push(
      query.onSnapshot(
        (snap) => {
          const seen = new Map();
          snap.forEach((doc) => seen.set(doc.id, doc.get('n')));
          querySeen[q] = seen;
          wake();
        },
        (err) => fail(`query listener ${q}: ${err}`),
      ),
    );
  });
  const expected = (q) => (q < queryCount ? refs.filter((_, i) => i % queryCount === q).length : docCount);
  const allAt = (n) => () =>
    docSeen.every((v) => v === n) &&
    querySeen.every((seen, q) => seen.size === expected(q) && [...seen.values()].every((v) => v === n));
  progress = () =>
    `documents seen: ${docSeen.filter((v) => v !== undefined).length}/${docCount}, ` +
    `queries complete: ${querySeen.filter((s, q) => s.size === expected(q)).length}/${querySeen.length}`;
  await waitFor(allAt(0));
  const listening = Date.now();

  // Every update goes through the instance that is watching.
  phase = 'update';
  let updated = 0;
  progress = () =>
    `updates done: ${updated}/${docCount}, documents seen at 1: ` +
    `${docSeen.filter((v) => v === 1).length}/${docCount}`;
  const parallel = 16;
  let next = 0;
  const worker = async () => {
    while (next < refs.length) {
      const ref = refs[next++];
      await ref.update({ n: 1 });
      updated++;
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));

  phase = 'see updates';
  await waitFor(allAt(1));
  const done = Date.now();

  // Unsubscribing half-closes each Listen stream; terminate() waits until
  // the server has ended every one of them.
  phase = 'terminate';
  progress = () => 'the client still has streams open';
  unsubscribes.forEach((u) => u());
  await db.terminate();
  clearTimeout(deadline);
  // Nothing may be left open: a stream the server never ends would keep
  // this process alive (unref'd, this timer does not).
  phase = 'exit';
  setTimeout(
    () => {
      const open = {};
      for (const kind of process.getActiveResourcesInfo()) open[kind] = (open[kind] ?? 0) + 1;
      fail(`the process is still alive 10 s after terminate(), holding ${JSON.stringify(open)}`);
    },
    10000,
  ).unref();
  console.log(
    `ok: ${docCount} documents and ${querySeen.length} queries watched by one client; ` +
      `initial snapshots ${listening - started} ms, updates seen by every listener ${done - listening} ms`,
  );
}

main().catch((err) => fail(String(err && err.stack ? err.stack : err)));
