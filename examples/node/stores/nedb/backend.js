#!/usr/bin/env node
// A backend on NeDB (@seald-io/nedb), the embedded document store, one datastore per Session
// (`<id>.nedb/data.db`):
//
//     scopecheck validate --exec 'node examples/node/stores/nedb/backend.js'
//     scopecheck validate --exec 'node examples/node/stores/nedb/backend.js --durable'
//
// Each commit inserts one document {n: its number, t: timestamp, w: [writes]}; sorting by `n`
// gives commit order.  NeDB keeps its datafile append-only: `insertAsync` appends the
// document's line with `fs.promises.appendFile` and no fsync, and the whole file is rewritten
// ("compacted") crash-safely -- a temporary `data.db~`, fsynced, renamed over `data.db`, the
// folder fsynced -- when the datastore is loaded and when `compactDatafileAsync` is called
// (lib/persistence.js, lib/storage.js).  Its documentation says so: "compaction forces the OS
// to physically flush data to disk, while appends to the data file do not".  The default
// setting is that: `new Datastore({ filename })`, `loadDatabaseAsync()`, `insertAsync`.
// `--durable` is what a user who wants every commit on disk would add from those docs: a
// `compactDatafileAsync()` after each insert, the commit acknowledged only once it is done.
//
// Both settings pass NeDB's documented serialization hooks a line terminator escape: NeDB
// writes each document as one `JSON.stringify` line but reads the datafile back split on every
// Unicode line terminator (lib/byline.js:75), U+0085, U+2028 and U+2029 included, which
// `JSON.stringify` leaves raw inside a string.  Without the escape a commit holding one of them
// is read back as corrupt lines: dropped with its Session's later state, or the whole datastore
// refused (docs/findings.md).
"use strict";
const path = require("path");
const Datastore = require("@seald-io/nedb");
const { serveStore } = require("../sessions.js");

const DURABLE = process.argv.includes("--durable");

// A JSON line with U+0085, U+2028 and U+2029 written as `\u` escapes: the same JSON, and a
// line to byline; JSON.parse reads it back unchanged, so deserialization is the identity.
const escapeTerminators = (line) =>
  line.replace(/[\u0085\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
const HOOKS = { afterSerialization: escapeTerminators, beforeDeserialization: (line) => line };

class NedbLog {
  constructor(db, count) { this.db = db; this.count = count; }
  static async open(folder) {
    const db = new Datastore({ filename: path.join(folder, "data.db"), ...HOOKS });
    await db.loadDatabaseAsync();  // makes the folder and the file if missing; compacts
    return new NedbLog(db, await db.countAsync({}));
  }
  async records() {
    const docs = await this.db.findAsync({}).sort({ n: 1 });
    return docs.map((doc) => ({ t: doc.t, w: doc.w }));
  }
  async append(record) {
    await this.db.insertAsync({ n: this.count, ...record });
    this.count += 1;
    if (DURABLE) await this.db.compactDatafileAsync();
  }
  async close() {}  // a Datastore holds no open file between operations
}

serveStore({
  name: DURABLE ? "nedb-durable" : "nedb",
  suffix: ".nedb",
  durable: DURABLE,
  build: async (folder) => { await NedbLog.open(folder); },
  connect: (folder) => NedbLog.open(folder),
});
