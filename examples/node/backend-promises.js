#!/usr/bin/env node
// examples/node/backend.js with every file operation through `fs/promises` (open, write,
// FileHandle.sync, truncate, stat, readFile, readdir, mkdir, unlink), so the calls run on
// libuv's thread pool rather than the main thread -- the shape of most real Node.js code:
//
//     scopecheck validate --exec 'node examples/node/backend-promises.js'
//
// Same files, durability and recovery as backend.js (read it for the layout).  Requests are
// still answered one at a time, in order: each line waits for the previous answer.  Only the
// response itself is written synchronously to stdout (one write per response, PROC-4).
//
// `--stream` appends through a write stream on the Session's descriptor
// (`fs.createWriteStream`) instead of `FileHandle.write`; a stream that failed is dropped and the
// next append makes a new one.  `--no-fsync`, `--no-dir-fsync` and `--no-cut-back` plant the
// same bugs as in backend.js.
"use strict";
const fs = require("fs");
const fsp = require("fs/promises");
const path = require("path");

const NO_FSYNC = process.argv.includes("--no-fsync");
const NO_DIR_FSYNC = process.argv.includes("--no-dir-fsync");
const NO_CUT_BACK = process.argv.includes("--no-cut-back");
const STREAM = process.argv.includes("--stream");
const { refuse, io, compareCodePoints, checkSessionId, checkShape, checkReferences, State, serve } =
  require("./protocol.js");  // the checks, a Session's state and the request loop, shared

// -- files (every call through fs/promises) -------------------------------------------------

async function syncDir(dir) {
  if (NO_DIR_FSYNC) return;
  const fh = await fsp.open(dir, "r");
  try { await fh.sync(); } finally { await fh.close(); }
}
async function exists(file) {
  try { await fsp.stat(file); return true; }
  catch (error) { if (error.code === "ENOENT") return false; throw io(`stat ${file}`, error); }
}
async function writeAll(fh, buffer) {  // a short write (a disk filling up): write the rest, or fail
  for (let done = 0; done < buffer.length;) done += (await fh.write(buffer, done)).bytesWritten;
}
function transaction(line) {  // a log line as written by commit, or null
  let record;
  try { record = JSON.parse(line); } catch (_) { return null; }
  const ok = record !== null && typeof record === "object" && Number.isInteger(record.s) && Number.isInteger(record.t) && Array.isArray(record.w);
  return ok ? record : null;
}

class Handle {
  constructor(repo, id, file, state, fh, size) {
    this.repo = repo; this.id = id; this.file = file; this.state = state; this.closed = false; this.unusable = null;
    this.fh = fh; this.size = size; this.stream = null;
  }
  static async open(repo, id, file, state) {
    const fh = await fsp.open(file, "a");
    try { return new Handle(repo, id, file, state, fh, (await fh.stat()).size); }
    catch (error) { await fh.close().catch(() => {}); throw error; }
  }
  open() { if (this.closed) refuse("closed", "storage is closed"); return this.state; }
  async commit(writes, now) {
    const state = this.open();
    checkShape(writes);
    // unusable after the one-scope rule and before ids, an empty commit included, as
    // scopecheck's JSONL backend (docs/protocol.md)
    if (this.unusable) refuse("unusable", `refusing writes until the Session is opened again: ${this.unusable}`);
    checkReferences(writes, (id) => state.entries.has(id) || state.usage.has(id), (id) => state.entries.has(id));
    if (writes.length === 0) return [];
    const first = state.nextSeq;
    const line = Buffer.from(JSON.stringify({ s: first, t: now, w: writes }) + "\n");
    try {
      await this.append(line);
    } catch (error) {
      if (!NO_CUT_BACK) await this.cutBack(error);
      throw io(`append to ${this.id}`, error);
    }
    try {
      if (!NO_FSYNC) await this.fh.sync();
    } catch (error) {
      await this.cutBack(error);  // the failed commit must not come back after a restart
      this.unusable = `fsync failed (${error.code})`;  // the data may be gone: never retry blind
      throw io(`fsync of ${this.id}`, error);
    }
    this.size += line.length;
    state.apply(writes, first, now);
    return writes.map((_, i) => ({ seq: first + i, timestamp: now }));
  }
  async append(line) {
    if (!STREAM) return writeAll(this.fh, line);
    if (!this.stream) {
      // the stream writes the rest of a short write itself, and fails when that fails
      this.stream = fs.createWriteStream(null, { fd: this.fh.fd, autoClose: false });
      this.stream.on("error", () => {});  // answered through the write's callback
    }
    const stream = this.stream;
    try {
      await new Promise((resolve, reject) => stream.write(line, (error) => (error ? reject(error) : resolve())));
    } catch (error) {
      this.stream = null;  // a stream that failed is destroyed: the next append makes a new one
      throw error;
    }
  }
  async cutBack(error) {
    try { await this.fh.truncate(this.size); await this.fh.sync(); }
    catch (_) { this.unusable = `a failed append could not be cut back (${error.code})`; }
  }
  async close() {
    if (this.closed) return;
    this.closed = true;
    this.repo.open.delete(this.id);
    if (this.stream) this.stream.destroy();  // autoClose is off: the descriptor is the handle's
    await this.fh.close().catch(() => {});
  }
}

class Repository {
  constructor(root) { this.root = root; this.open = new Map(); }
  static async at(root) {
    try { await fsp.mkdir(root, { recursive: true }); } catch (error) { throw io(`create ${root}`, error); }
    return new Repository(root);
  }
  file(id) { return path.join(this.root, encodeURIComponent(id) + ".log"); }
  async list() {
    let names;
    try { names = await fsp.readdir(this.root); } catch (error) { throw io("list", error); }
    return names.filter((n) => n.endsWith(".log")).map((n) => decodeURIComponent(n.slice(0, -4))).sort(compareCodePoints);
  }
  async create(id) {
    checkSessionId(id);
    const file = this.file(id);
    if (await exists(file)) refuse("already_exists", `session ${id} exists`);
    try {
      const fh = await fsp.open(file, "wx");
      try { await fh.sync(); } finally { await fh.close(); }
      await syncDir(this.root);
    } catch (error) { throw io(`create ${id}`, error); }
    return this.handle(id, file, new State());
  }
  async load(id, file) {
    let content;
    // A create that failed after making the file leaves it behind: make its name durable
    // before anything is acknowledged on it.
    try { await syncDir(this.root); } catch (error) { throw io(`open ${id}`, error); }
    try { content = await fsp.readFile(file); } catch (error) { throw io(`read ${id}`, error); }
    const end = content.lastIndexOf(0x0a) + 1;
    if (end < content.length) {  // a torn last line: that commit was never acknowledged
      try {
        const fh = await fsp.open(file, "r+");
        try { await fh.truncate(end); await fh.sync(); } finally { await fh.close(); }
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
  async openSession(id) {
    checkSessionId(id);
    const file = this.file(id);
    if (!(await exists(file))) refuse("not_found", `no session ${id}`);
    if (this.open.has(id)) refuse("already_open", `session ${id} is open`);
    return this.handle(id, file, await this.load(id, file));
  }
  async handle(id, file, state) {
    let h;
    try { h = await Handle.open(this, id, file, state); } catch (error) { throw io(`open ${id}`, error); }
    this.open.set(id, h);
    return h;
  }
  async delete(id) {
    checkSessionId(id);
    if (this.open.has(id)) refuse("already_open", `session ${id} is open`);
    const file = this.file(id);
    if (!(await exists(file))) refuse("not_found", `no session ${id}`);
    try { await fsp.unlink(file); await syncDir(this.root); } catch (error) { throw io(`delete ${id}`, error); }
  }
  async close() { for (const h of [...this.open.values()]) await h.close(); }
}

serve({ name: "node-promises-backend", open: (root) => Repository.at(root) });
