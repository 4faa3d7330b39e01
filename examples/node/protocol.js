// The process protocol (docs/protocol.md) for the Node.js backends here: the contract's checks
// in the model's order, one Session's state rebuilt from its transactions, and the loop that
// answers requests on stdin with one response line each on stdout.  A backend brings only its
// storage, as a repository:
//
//     serve({ name, open: async (root) => repository })
//
//     repository.create(id), .openSession(id) -> a handle;  .list() -> [id, ...];
//     .delete(id);  .close()  (every handle)
//     handle.commit(writes, now) -> [{seq, timestamp}, ...];  handle.open() -> its State
//         (refusing `closed` once closed);  handle.close()
//
// Any of them may return a promise: requests are still answered one at a time, in order, each
// after the answer before it.  A `Refusal` is answered with its code; anything else a backend
// throws is its own bug, answered `protocol_error` with the stack (PROC-2).
"use strict";
const fs = require("fs");
const readline = require("readline");

const DEFAULT_LIMIT = 1000, MAX_LIMIT = 10000;

class Refusal extends Error {
  constructor(code, message) { super(message); this.code = code; }
}
const refuse = (code, message) => { throw new Refusal(code, message); };

// -- ordering and checks (the contract's, in the model's order: TX-5) ----------------------------

function compareCodePoints(a, b) {  // code-point order (JavaScript's < compares UTF-16 units)
  const x = Array.from(a), y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const p = x[i].codePointAt(0), q = y[i].codePointAt(0);
    if (p !== q) return p < q ? -1 : 1;
  }
  return x.length - y.length;
}
const sortKey = (scope, ns, key) => [scope === null ? 0 : 1, scope || "", ns, key];
function compareKeys(a, b) {
  if (a[0] !== b[0]) return a[0] - b[0];
  for (let i = 1; i < 4; i++) { const c = compareCodePoints(a[i], b[i]); if (c) return c; }
  return 0;
}
function checkSessionId(id) {
  if (typeof id !== "string" || id === "" || id.includes("\0") || !id.isWellFormed())
    refuse("invalid_session_id", `session id must be a non-empty well-formed string without NUL`);
  return id;
}
function checkName(what, name) {
  if (typeof name !== "string" || name.includes("\0")) refuse("invalid_address", `${what} must be a string without NUL`);
  return name;
}
const ADDRESSED = new Set(["set", "delete", "append", "drop"]);
function checkShape(writes) {
  if (!Array.isArray(writes)) refuse("invalid_transaction", "commit takes a list of writes");
  writes.forEach((w, i) => { if (w.kind === "not_a_write") refuse("invalid_transaction", `item ${i} is not a write`); });
  let scope = null, sessionAt = null;
  writes.forEach((w, i) => {
    const ephemeral = ADDRESSED.has(w.kind) && w.scope !== null;
    if (ephemeral) {
      if (scope === null) scope = w.scope;
      else if (w.scope !== scope) refuse("invalid_transaction", `write ${i} is in another ephemeral scope`);
    } else if (sessionAt === null) sessionAt = i;
    if (scope !== null && sessionAt !== null) refuse("invalid_transaction", "session and ephemeral writes mixed");
  });
}
function checkReferences(writes, idExists, entryExists) {
  const ids = new Set(), entries = new Set();
  for (const w of writes) {
    if (w.kind !== "entry" && w.kind !== "usage") continue;
    if (ids.has(w.id) || idExists(w.id)) refuse("duplicate_id", `id ${w.id} is already used`);
    if (w.kind === "entry") {
      if (w.parent_id !== null && !entries.has(w.parent_id) && !entryExists(w.parent_id))
        refuse("unknown_reference", `parent ${w.parent_id} is not an earlier entry`);
      entries.add(w.id);
    } else if (w.entry_id !== null && !entries.has(w.entry_id) && !entryExists(w.entry_id)) {
      refuse("unknown_reference", `usage names entry ${w.entry_id}, which does not exist`);
    }
    ids.add(w.id);
  }
}
function checkQuery(q) {
  const isInt = (v) => typeof v === "number" && Number.isInteger(v);
  if (q.cursor !== null && (!isInt(q.cursor) || q.cursor < 0)) refuse("invalid_query", "bad cursor");
  if (q.order !== "asc" && q.order !== "desc") refuse("invalid_query", "order is asc or desc");
  let limit = DEFAULT_LIMIT;
  if (q.limit !== null) { if (!isInt(q.limit) || q.limit < 1) refuse("invalid_query", "bad limit"); limit = Math.min(q.limit, MAX_LIMIT); }
  if (q.stop_at_tag !== null && (typeof q.stop_at_tag !== "string" || q.stop_at_tag === "")) refuse("invalid_query", "bad stop_at_tag");
  return { cursor: q.cursor, order: q.order, limit, stop: q.stop_at_tag };
}

// -- one Session's state, rebuilt from its log ---------------------------------------------------

const TOKENS = [["input", "input"], ["output", "output"], ["cache_read", "cacheRead"], ["cache_write", "cacheWrite"], ["total_tokens", "totalTokens"]];
const COSTS = [["cost_input", "input"], ["cost_output", "output"], ["cost_cache_read", "cacheRead"], ["cost_cache_write", "cacheWrite"], ["cost_total", "total"]];
const slot = (scope, ns, key) => JSON.stringify([scope, ns, key]);

class State {
  constructor() { this.nextSeq = 1; this.values = new Map(); this.lists = new Map(); this.entries = new Map(); this.usage = new Map(); }
  apply(writes, first, now) {
    writes.forEach((w, i) => {
      const seq = first + i;
      if (w.kind === "set") this.values.set(slot(w.scope, w.namespace, w.key), { seq, value: w.value });
      else if (w.kind === "delete") this.values.delete(slot(w.scope, w.namespace, w.key));
      else if (w.kind === "append") {
        const k = slot(w.scope, w.namespace, w.key);
        if (!this.lists.has(k)) this.lists.set(k, []);
        this.lists.get(k).push({ seq, value: w.element, tag: w.tag });
      } else if (w.kind === "drop") this.lists.delete(slot(w.scope, w.namespace, w.key));
      else if (w.kind === "entry") this.entries.set(w.id, { id: w.id, parent_id: w.parent_id, type: w.type, payload: w.payload, seq, timestamp: now });
      else if (w.kind === "usage") this.usage.set(w.id, { id: w.id, usage: w.usage, entry_id: w.entry_id, adjustment: w.adjustment, details: w.details, seq });
      else if (w.kind === "retire") {
        for (const table of [this.values, this.lists]) for (const k of [...table.keys()]) if (JSON.parse(k)[0] === w.scope) table.delete(k);
      }
    });
    this.nextSeq = first + writes.length;
  }
  stats() {
    const usage = {};
    for (const [name] of [...TOKENS, ...COSTS]) usage[name] = 0;
    for (const row of [...this.usage.values()].sort((a, b) => a.seq - b.seq)) {
      const u = JSON.parse(row.usage), cost = u.cost || {};
      for (const [name, field] of TOKENS) usage[name] += u[field] || 0;
      for (const [name, field] of COSTS) usage[name] += cost[field] || 0;
    }
    const messages = [...this.entries.values()].filter((e) => e.type === "message").length;
    return { message_count: messages, usage };
  }
  snapshot() {
    const keyed = (m) => [...m.entries()].map(([k, v]) => [...JSON.parse(k), v]).sort((a, b) => compareKeys(sortKey(a[0], a[1], a[2]), sortKey(b[0], b[1], b[2])));
    return {
      entries: [...this.entries.values()].sort((a, b) => a.seq - b.seq),
      usage: [...this.usage.values()].sort((a, b) => a.seq - b.seq),
      values: keyed(this.values),
      lists: keyed(this.lists).filter((row) => row[3].length > 0),
      stats: this.stats(),
    };
  }
}

function io(what, error) { return new Refusal("io_error", `${what}: ${error.code || error.message}`); }

// -- the protocol ----------------------------------------------------------------------------

function serve({ name, open }) {
  let repo = null;
  const handles = new Map();
  let nextHandle = 1;
  function storage(request) {
    const h = handles.get(request.handle);
    if (!h) refuse("invalid_payload", `no handle ${request.handle}`);
    return h;
  }
  function opened(h) { const n = nextHandle++; handles.set(n, h); return { handle: n, parent_session_id: null }; }

  const OPS = {
    async hello(r) {
      if (r.protocol !== 1) refuse("invalid_payload", "this backend speaks protocol 1");
      if (repo) await repo.close();
      handles.clear();
      repo = null;
      repo = await open(r.root);
      return { protocol: 1, name, fork: false };
    },
    create: async (r) => opened(await repo.create(r.session)),
    open: async (r) => opened(await repo.openSession(r.session)),
    list: () => repo.list(),
    delete: async (r) => { await repo.delete(r.session); return null; },
    close_repository: async () => { await repo.close(); return null; },
    commit: (r) => storage(r).commit(r.writes, r.now),
    get_value(r) { const a = r.address; return storage(r).open().values.get(slot(a.scope, a.namespace, a.key)) || null; },
    scan_values(r) {
      const values = storage(r).open().values;  // closed first, then the names (the model's order)
      const ns = checkName("namespace", r.namespace), prefix = checkName("prefix", r.prefix);
      const rows = [];
      for (const [k, v] of values) {
        const [scope, n, key] = JSON.parse(k);
        if (scope === r.scope && n === ns && key.startsWith(prefix)) rows.push([key, v]);
      }
      return rows.sort((a, b) => compareCodePoints(a[0], b[0]));
    },
    read_list(r) {
      const state = storage(r).open(), q = checkQuery(r), a = r.address;
      let items = state.lists.get(slot(a.scope, a.namespace, a.key)) || [];
      items = q.order === "asc" ? items.filter((e) => q.cursor === null || e.seq > q.cursor)
                                : [...items].reverse().filter((e) => q.cursor === null || e.seq < q.cursor);
      const page = items.slice(0, q.limit);
      if (q.stop !== null) { const at = page.findIndex((e) => e.tag === q.stop); if (at >= 0) return page.slice(0, at + 1); }
      return page;
    },
    get_entry: (r) => storage(r).open().entries.get(r.entry_id) || null,
    get_usage: (r) => storage(r).open().usage.get(r.usage_id) || null,
    stats: (r) => storage(r).open().stats(),
    snapshot: (r) => storage(r).open().snapshot(),
    close: async (r) => { await storage(r).close(); return null; },
  };

  async function answer(request) {
    try {
      if (request === null || typeof request !== "object" || !Number.isInteger(request.id)) {
        return { id: null, error: { code: "invalid_payload", message: "a request is one JSON object with an integer id", details: {} } };
      }
      if (!Object.hasOwn(OPS, request.op)) refuse("invalid_payload", `no op ${request.op}`);
      const op = OPS[request.op];
      return { id: request.id, ok: await op(request) };
    } catch (error) {
      if (error instanceof Refusal) return { id: request.id, error: { code: error.code, message: error.message, details: {} } };
      return { id: request.id, error: { code: "protocol_error", message: `the backend raised ${error.stack}`, details: {} } };
    }
  }

  const pause = new Int32Array(new SharedArrayBuffer(4));
  function reply(message) {
    const data = Buffer.from(JSON.stringify(message) + "\n");
    // One write per response (the trace shows when it left, PROC-4).  A pipe takes at most what
    // it has room for, so a large response may go in several writes: write the rest.  A
    // non-blocking stdout (a parent such as tsx may leave it so) says EAGAIN when the pipe is
    // full: wait a moment for the reader to drain it and write the rest.
    for (let done = 0; done < data.length;) {
      try { done += fs.writeSync(1, data, done); }
      catch (error) {
        if (error.code === "EAGAIN" || error.code === "EINTR") { Atomics.wait(pause, 0, 0, 1); continue; }
        // stdout is the protocol's: nothing else may go there; say why on stderr and stop
        fs.writeSync(2, `${name}: cannot write a response to stdout: ${error.code}\n`);
        process.exit(2);
      }
    }
  }

  // Requests are answered one at a time, in order: each waits for the answer before it.
  let queue = Promise.resolve();
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  lines.on("line", (line) => {
    queue = queue.then(async () => {
      let request;
      try { request = JSON.parse(line); }
      catch (_) { request = null; }  // answered with id null and invalid_payload; then the next line
      reply(await answer(request));
    });
  });
  lines.on("close", () => {
    queue.then(async () => { if (repo) await repo.close(); process.exit(0); });
  });
}

module.exports = {
  Refusal, refuse, io, compareCodePoints, checkSessionId, checkName, checkShape, checkReferences,
  checkQuery, slot, State, serve,
};
