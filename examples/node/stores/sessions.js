// The Session semantics every Node store adapter here shares: the store keeps one record per
// commit.  The JavaScript twin of examples/stores/sessions.py, on the protocol layer of
// examples/node/protocol.js.
//
// A store adapter says only how its store keeps a Session's records -- a log: `records()` in
// commit order, `append(record)` as one atomic put, `close()` -- and how it makes and opens the
// store of one Session (`build(path)`, `connect(path) -> log`), then calls
//
//     serveStore({ name, suffix, durable, build, connect })
//
// A record is a transaction's writes in their wire form, `{"t": timestamp, "w": [writes]}`;
// the values, lists, entries, usage, retirements and the one seq counter are rebuilt on every
// open by replaying the records in order (protocol.js's State).  So whatever a crash does to a
// Session is what the store did to its records: the verdict is the store's (docs/findings.md).
//
// Files: `<root>/<encodeURIComponent(id)><suffix>`, the store's own folder.  A Session is built
// aside (`….new`) and renamed into place, and deleted by renaming it away (`….gone`) before its
// files are removed, the root fsynced after each rename: a crash never leaves half a Session
// under its name (CRASH-FS-2, CRASH-FS-11), and leftovers are removed when the repository is
// made.  `durable` also fsyncs a new Session's folder after the store made its files there.  A
// store's own error is `io_error`, except a failed append: its commit fails with
// `outcome_unknown` (the store's own reading decides whether it was kept, CRASH-FS-14), and the
// handle refuses commits with `unusable` until the Session is opened again (CRASH-FS-10).
"use strict";
const fsp = require("fs/promises");
const path = require("path");
const {
  Refusal, refuse, io, compareCodePoints, checkSessionId, checkShape, checkReferences, State, serve,
} = require("../protocol.js");

const LEFTOVERS = [".new", ".gone"];
const KINDS = new Set(["set", "delete", "append", "drop", "entry", "usage", "retire"]);

async function fsyncPath(where) {  // fsync a directory (or file), opened read-only
  const fh = await fsp.open(where, "r");
  try { await fh.sync(); } finally { await fh.close(); }
}
async function remove(where) { await fsp.rm(where, { recursive: true, force: true }); }
async function exists(where) {
  try { await fsp.lstat(where); return true; }
  catch (error) { if (error.code === "ENOENT") return false; throw error; }
}
async function storeIo(what, id, call) {  // a store's own error is io_error; a refusal stays one
  try { return await call(); }
  catch (error) { if (error instanceof Refusal) throw error; throw io(`${what} ${JSON.stringify(id)}`, error); }
}

class SessionFiles {
  constructor(root, store) { this.root = root; this.store = store; }
  static async at(root, store) {
    await fsp.mkdir(root, { recursive: true });
    const ends = LEFTOVERS.map((end) => store.suffix + end);
    for (const name of await fsp.readdir(root)) {  // a create or a delete a crash cut short
      if (ends.some((end) => name.endsWith(end))) await remove(path.join(root, name));
    }
    return new SessionFiles(root, store);
  }
  path(id) { return path.join(this.root, encodeURIComponent(id) + this.store.suffix); }
  async names() {
    const end = this.store.suffix.length;
    return (await fsp.readdir(this.root)).filter((n) => n.endsWith(this.store.suffix))
      .map((n) => decodeURIComponent(n.slice(0, -end))).sort(compareCodePoints);
  }
  exists(id) { return exists(this.path(id)); }
  async create(id) {
    const where = this.path(id);
    await remove(where + ".new");
    await this.store.build(where + ".new");
    if (this.store.durable) await fsyncPath(where + ".new");  // the names of the files the store made
    await fsp.rename(where + ".new", where);
    await fsyncPath(this.root);
    return this.store.connect(where);
  }
  open(id) { return this.store.connect(this.path(id)); }
  async delete(id) {
    const where = this.path(id);
    await fsp.rename(where, where + ".gone");
    await fsyncPath(this.root);
    await remove(where + ".gone");
  }
}

function replay(id, records) {
  if (!Array.isArray(records)) refuse("corrupt", `${id}: the store holds no list of records`);
  const state = new State();
  records.forEach((record, n) => {
    const ok = record !== null && typeof record === "object" && Number.isInteger(record.t) &&
      Array.isArray(record.w) && record.w.every((w) => w !== null && typeof w === "object" && KINDS.has(w.kind));
    if (!ok) refuse("corrupt", `${id}: record ${n} is not a commit`);
    try { state.apply(record.w, state.nextSeq, record.t); }
    catch (error) { refuse("corrupt", `${id}: record ${n}: ${error.message}`); }
  });
  return state;
}

class StoreHandle {
  constructor(repo, id, log, state) {
    this.repo = repo; this.id = id; this.log = log; this.state = state; this.closed = false; this.unusable = null;
  }
  open() { if (this.closed) refuse("closed", "storage is closed"); return this.state; }
  async commit(writes, now) {
    const state = this.open();
    checkShape(writes);
    // unusable after the one-scope rule and before ids, an empty commit included (docs/protocol.md)
    if (this.unusable) refuse("unusable", `${this.unusable}; close and reopen the Session`);
    checkReferences(writes, (id) => state.entries.has(id) || state.usage.has(id), (id) => state.entries.has(id));
    if (writes.length === 0) return [];
    const first = state.nextSeq;
    try {
      await this.log.append({ t: now, w: writes });
    } catch (error) {
      this.unusable = `a write to the store failed (${error.code || error.message})`;
      // What the store kept of a put that failed is the store's to say (CRASH-FS-14).
      throw new Refusal("outcome_unknown", `commit to ${JSON.stringify(this.id)}, kept or not: ${error.code || error.message}`);
    }
    state.apply(writes, first, now);
    return writes.map((_, i) => ({ seq: first + i, timestamp: now }));
  }
  async close() {
    if (this.closed) return;
    this.closed = true;
    this.repo.open.delete(this.id);
    await storeIo("close", this.id, () => this.log.close());
  }
}

class StoreRepository {
  constructor(files) { this.files = files; this.open = new Map(); }
  list() { return storeIo("list", "", () => this.files.names()); }
  async create(id) {
    checkSessionId(id);
    if (await storeIo("create", id, () => this.files.exists(id))) refuse("already_exists", `session ${id} exists`);
    const log = await storeIo("create", id, () => this.files.create(id));
    return this.attach(id, log, new State());
  }
  async openSession(id) {
    checkSessionId(id);
    if (!(await storeIo("open", id, () => this.files.exists(id)))) refuse("not_found", `no session ${id}`);
    if (this.open.has(id)) refuse("already_open", `session ${id} is open`);
    const log = await storeIo("open", id, () => this.files.open(id));
    let state;
    try {
      state = replay(id, await storeIo("read", id, () => log.records()));
    } catch (error) {
      await Promise.resolve().then(() => log.close()).catch(() => {});
      throw error;
    }
    return this.attach(id, log, state);
  }
  attach(id, log, state) {
    const handle = new StoreHandle(this, id, log, state);
    this.open.set(id, handle);
    return handle;
  }
  async delete(id) {
    checkSessionId(id);
    if (this.open.has(id)) refuse("already_open", `session ${id} is open`);
    if (!(await storeIo("delete", id, () => this.files.exists(id)))) refuse("not_found", `no session ${id}`);
    await storeIo("delete", id, () => this.files.delete(id));
  }
  async close() { for (const h of [...this.open.values()]) await h.close(); }
}

// The backend process over one store: a failure to reach the root is a coded error too.
function serveStore(store) {
  serve({
    name: store.name,
    open: async (root) => new StoreRepository(await storeIo("open the store at", root, () => SessionFiles.at(root, store))),
  });
}

module.exports = { serveStore, fsyncPath };
