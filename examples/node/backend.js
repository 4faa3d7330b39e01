#!/usr/bin/env node
// A scoped-session backend in JavaScript, speaking scopecheck's process protocol
// (docs/protocol.md) on stdin/stdout:
//
//     scopecheck validate --exec 'node examples/node/backend.js'
//
// One JSON-lines log per Session under the root, `<encodeURIComponent(id)>.log`, one line per
// transaction {"s": first seq, "t": timestamp, "w": [writes in their wire form]}.  Payloads are
// kept as the JSON text they arrive in, so they come back byte for byte.  Durability: a commit
// appends its line and fsyncs before it answers; create and delete fsync the directory; open
// cuts a torn last line (an unacknowledged commit) off, durably, before appending.  A failed
// append or fsync is cut back; after a failed fsync or cut the handle refuses writes
// (`unusable`) until the Session is opened again.
//
// `--no-fsync` and `--no-dir-fsync` plant the two classic durability bugs for the checks, and
// `--no-cut-back` a third: a failed append is left in the file and the handle stays usable, so
// after a short write (a disk filling up: `fs.writeSync` stores part of the line, the rest fails
// with ENOSPC) the next commit appends its line after the bytes the failed one stored.
// `--strict-tail` plants a bug in reading alone: open refuses a torn last line as corrupt
// instead of cutting it off, so a crash in the middle of an append leaves a Session no one
// can open again (CRASH-FS-1), on a disk that holds every acknowledged commit.
"use strict";
const fs = require("fs");
const path = require("path");

const NO_FSYNC = process.argv.includes("--no-fsync");
const NO_DIR_FSYNC = process.argv.includes("--no-dir-fsync");
const NO_CUT_BACK = process.argv.includes("--no-cut-back");
const STRICT_TAIL = process.argv.includes("--strict-tail");
const { refuse, io, compareCodePoints, checkSessionId, checkShape, checkReferences, State, serve } =
  require("./protocol.js");  // the checks, a Session's state and the request loop, shared

// -- files -----------------------------------------------------------------------------------

function syncDir(dir) {
  if (NO_DIR_FSYNC) return;
  const fd = fs.openSync(dir, "r");
  try { fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
}
function transaction(line) {  // a log line as written by commit, or null
  let record;
  try { record = JSON.parse(line); } catch (_) { return null; }
  const ok = record !== null && typeof record === "object" && Number.isInteger(record.s) && Number.isInteger(record.t) && Array.isArray(record.w);
  return ok ? record : null;
}

class Handle {
  constructor(repo, id, file, state) {
    this.repo = repo; this.id = id; this.file = file; this.state = state; this.closed = false; this.unusable = null;
    this.fd = fs.openSync(file, "a");
    this.size = fs.fstatSync(this.fd).size;
  }
  open() { if (this.closed) refuse("closed", "storage is closed"); return this.state; }
  commit(writes, now) {
    const state = this.open();
    checkShape(writes);
    // unusable after the one-scope rule and before ids, an empty commit included, as
    // scopecheck's JSONL backend (docs/protocol.md)
    if (this.unusable) refuse("unusable", `refusing writes until the Session is opened again: ${this.unusable}`);
    checkReferences(writes, (id) => state.entries.has(id) || state.usage.has(id), (id) => state.entries.has(id));
    if (writes.length === 0) return [];
    const first = state.nextSeq;
    const line = Buffer.from(JSON.stringify({ s: first, t: now, w: writes }) + "\n");
    try {  // a short write (a disk filling up) returns less: write the rest, or fail
      for (let done = 0; done < line.length;) done += fs.writeSync(this.fd, line, done, line.length - done);
    } catch (error) {
      if (!NO_CUT_BACK) this.cutBack(error);
      throw io(`append to ${this.id}`, error);
    }
    try {
      if (!NO_FSYNC) fs.fsyncSync(this.fd);
    } catch (error) {
      this.cutBack(error);  // the failed commit must not come back after a restart
      this.unusable = `fsync failed (${error.code})`;  // the data may be gone: never retry blind
      throw io(`fsync of ${this.id}`, error);
    }
    this.size += line.length;
    state.apply(writes, first, now);
    return writes.map((_, i) => ({ seq: first + i, timestamp: now }));
  }
  cutBack(error) {
    try { fs.ftruncateSync(this.fd, this.size); fs.fsyncSync(this.fd); }
    catch (_) { this.unusable = `a failed append could not be cut back (${error.code})`; }
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    fs.closeSync(this.fd);
    this.repo.open.delete(this.id);
  }
}

class Repository {
  constructor(root) { this.root = root; this.open = new Map(); fs.mkdirSync(root, { recursive: true }); }
  file(id) { return path.join(this.root, encodeURIComponent(id) + ".log"); }
  list() { return fs.readdirSync(this.root).filter((n) => n.endsWith(".log")).map((n) => decodeURIComponent(n.slice(0, -4))).sort(compareCodePoints); }
  create(id) {
    checkSessionId(id);
    const file = this.file(id);
    if (fs.existsSync(file)) refuse("already_exists", `session ${id} exists`);
    try {
      const fd = fs.openSync(file, "wx");
      try { fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
      syncDir(this.root);
    } catch (error) { throw io(`create ${id}`, error); }
    return this.handle(id, file, new State());
  }
  load(id, file) {
    let content;
    // A create that failed after making the file leaves it behind: make its name durable
    // before anything is acknowledged on it.
    try { if (!NO_DIR_FSYNC) syncDir(this.root); } catch (error) { throw io(`open ${id}`, error); }
    try { content = fs.readFileSync(file); } catch (error) { throw io(`read ${id}`, error); }
    const end = content.lastIndexOf(0x0a) + 1;
    if (end < content.length && STRICT_TAIL) refuse("corrupt", `${id} ends in a torn line`);
    if (end < content.length) {  // a torn last line: that commit was never acknowledged
      try {
        const fd = fs.openSync(file, "r+");
        try { fs.ftruncateSync(fd, end); fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
      } catch (error) { throw io(`repair ${id}`, error); }
    }
    const state = new State();
    content.subarray(0, end).toString("utf8").split("\n").forEach((line, n) => {
      if (!line) return;
      const record = transaction(line);
      if (!record) refuse("corrupt", `${id} line ${n + 1} is not a transaction`);
      state.apply(record.w, record.s, record.t);
    });
    return state;
  }
  openSession(id) {
    checkSessionId(id);
    const file = this.file(id);
    if (!fs.existsSync(file)) refuse("not_found", `no session ${id}`);
    if (this.open.has(id)) refuse("already_open", `session ${id} is open`);
    return this.handle(id, file, this.load(id, file));
  }
  handle(id, file, state) {
    let h;
    try { h = new Handle(this, id, file, state); } catch (error) { throw io(`open ${id}`, error); }
    this.open.set(id, h);
    return h;
  }
  delete(id) {
    checkSessionId(id);
    if (this.open.has(id)) refuse("already_open", `session ${id} is open`);
    const file = this.file(id);
    if (!fs.existsSync(file)) refuse("not_found", `no session ${id}`);
    try { fs.unlinkSync(file); syncDir(this.root); } catch (error) { throw io(`delete ${id}`, error); }
  }
  close() { for (const h of [...this.open.values()]) h.close(); }
}

serve({ name: "node-backend", open: (root) => new Repository(root) });
