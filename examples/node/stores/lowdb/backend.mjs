#!/usr/bin/env node
// A backend on lowdb, the JSON-file database, one database per Session (`<id>.lowdb/db.json`):
//
//     scopecheck validate --exec 'node examples/node/stores/lowdb/backend.mjs'
//     scopecheck validate --exec 'node examples/node/stores/lowdb/backend.mjs --durable'
//     scopecheck validate --exec 'node examples/node/stores/lowdb/backend.mjs --careful'
//
// The database is `{"commits": [records]}`; each commit pushes its record with `db.update`,
// which rewrites the whole file.  lowdb's `JSONFile` adapter writes through steno's `Writer`:
// `writeFile` of a temporary `.db.json.tmp`, then `rename` over `db.json` -- atomic against a
// process crash, with no fsync of the file or its folder (steno/lib/index.js).  lowdb has no
// durability setting; its README says an adapter is any object with `read()` and `write()`, so
// `--durable` is what a user would write: `SyncedJSONFile`, the same temporary file and rename
// with the file fsynced before the rename and the folder fsynced after it.
//
// `--careful` is that adapter as a careful team would finish it: when the write fails after the
// rename may have happened (the folder's fsync fails), it puts the last text it read or wrote
// back the same way before it reports the failure, so a commit reported failed is not the
// file's content after a restart (CRASH-FS-9).
import fsp from "node:fs/promises";
import path from "node:path";
import { Low } from "lowdb";
import { JSONFile } from "lowdb/node";
import sessions from "../sessions.js";

const CAREFUL = process.argv.includes("--careful");
const DURABLE = CAREFUL || process.argv.includes("--durable");

class SyncedJSONFile {
  constructor(file) {
    this.file = file;
    this.temp = path.join(path.dirname(file), `.${path.basename(file)}.tmp`);
  }
  async read() {
    let text;
    try { text = await fsp.readFile(this.file, "utf-8"); }
    catch (error) { if (error.code === "ENOENT") return null; throw error; }
    return JSON.parse(text);
  }
  async write(data) { await this.replace(JSON.stringify(data, null, 2)); }
  async replace(text) {  // the temporary file, fsynced, renamed over the database, folder fsynced
    const fh = await fsp.open(this.temp, "w");
    try { await fh.writeFile(text); await fh.sync(); }
    finally { await fh.close(); }
    await fsp.rename(this.temp, this.file);
    await sessions.fsyncPath(path.dirname(this.file));
  }
}

class CarefulJSONFile extends SyncedJSONFile {
  async read() {
    const data = await super.read();
    this.last = data === null ? undefined : JSON.stringify(data, null, 2);
    return data;
  }
  async write(data) {
    const text = JSON.stringify(data, null, 2);
    try {
      await this.replace(text);
    } catch (error) {
      // The rename may be done and the new text visible; a failed folder fsync does not undo
      // it.  The text acknowledged last goes back in its place, durably, before the failure
      // is reported (a failure of this too leaves the outcome unknown: the caller's handle
      // refuses commits until the Session is opened again).
      if (this.last !== undefined) await this.replace(this.last).catch(() => {});
      throw error;
    }
    this.last = text;
  }
}

const Adapter = CAREFUL ? CarefulJSONFile : DURABLE ? SyncedJSONFile : JSONFile;

class LowLog {
  constructor(db) { this.db = db; }
  static async open(folder) {
    const db = new Low(new Adapter(path.join(folder, "db.json")), { commits: [] });
    await db.read();
    return new LowLog(db);
  }
  async records() { return this.db.data.commits; }
  async append(record) { await this.db.update(({ commits }) => commits.push(record)); }
  async close() {}  // lowdb holds no open file between operations
}

sessions.serveStore({
  name: CAREFUL ? "lowdb-careful" : DURABLE ? "lowdb-durable" : "lowdb",
  suffix: ".lowdb",
  durable: DURABLE,
  build: async (folder) => {
    await fsp.mkdir(folder);
    await (await LowLog.open(folder)).db.write();  // an empty database: {"commits": []}
  },
  connect: (folder) => LowLog.open(folder),
});
