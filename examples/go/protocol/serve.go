package protocol

import (
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
)

const defaultLimit, maxLimit = 1000, 10000

// Repository is what a backend supplies: its Sessions under one root.  The protocol checks a
// Session id before it calls Create, Open or Delete (REPO-5); each refuses with the contract's
// code (Refuse, IOError) in the model's order: Create `already_exists` (REPO-1); Open
// `not_found`, `already_open` (REPO-3, REPO-4); Delete `already_open`, `not_found` (REPO-6).
type Repository interface {
	List() []string // every Session id, in code-point order
	Create(id string) Storage
	Open(id string) Storage
	Delete(id string)
	Close() // closes every handle (close_repository)
}

// Storage is one open handle of a Session.
type Storage interface {
	State() *State                      // the Session's state; refuses `closed` once the handle is closed (LIFE-2)
	Commit(writes any, now int64) []any // on an open handle: State.Commit with the keeping
	Close()                             // closing a closed handle does nothing (LIFE-1)
}

// server is one backend process: the repository of the last `hello` and its handles.
type server struct {
	name       string
	open       func(root string) Repository
	repo       Repository
	handles    map[int64]Storage
	nextHandle int64
}

func (sv *server) storage(req *Object) Storage {
	v, _ := req.Get("handle")
	n, _ := isInt(v)
	h := sv.handles[n]
	if h == nil {
		Refuse("invalid_payload", "no handle %v", v)
	}
	return h
}

func (sv *server) opened(h Storage) O {
	n := sv.nextHandle
	sv.nextHandle++
	sv.handles[n] = h
	return O{{"handle", n}, {"parent_session_id", nil}}
}

func (sv *server) repository() Repository {
	if sv.repo == nil {
		Refuse("invalid_payload", "hello first")
	}
	return sv.repo
}

func (sv *server) session(req *Object) string {
	v, _ := req.Get("session")
	return checkSessionID(v)
}

func (sv *server) readList(req *Object) []any {
	state := sv.storage(req).State()
	a, _ := req.Get("address")
	ao, _ := a.(*Object)
	at := addressOf(ao, "address")
	c, _ := req.Get("cursor") // checked in the model's order: cursor, order, limit, stop_at_tag
	cursor, isCursor := isInt(c)
	if c != nil && (!isCursor || cursor < 0) {
		Refuse("invalid_query", "cursor must be a non-negative int or null")
	}
	order, _ := str(req, "order")
	if order != "asc" && order != "desc" {
		Refuse("invalid_query", "order must be asc or desc")
	}
	limit := int64(defaultLimit)
	if l, _ := req.Get("limit"); l != nil {
		n, ok := isInt(l)
		if !ok || n < 1 {
			Refuse("invalid_query", "limit must be a positive int")
		}
		if limit = n; limit > maxLimit {
			limit = maxLimit
		}
	}
	stop, _ := req.Get("stop_at_tag")
	if s, ok := stop.(string); stop != nil && (!ok || s == "") {
		Refuse("invalid_query", "stop_at_tag must be a non-empty string or null")
	}
	items := state.lists[at]
	page := []any{}
	for i := range items {
		e := items[i]
		if order == "desc" {
			e = items[len(items)-1-i]
		}
		if c != nil && (order == "asc" && e.seq <= cursor || order == "desc" && e.seq >= cursor) {
			continue
		}
		if int64(len(page)) == limit {
			break
		}
		page = append(page, elementJSON(e))
		if tag, ok := e.tag.(string); ok && stop != nil && tag == stop.(string) {
			break // the page is cut after the first element carrying the tag
		}
	}
	return page
}

func (sv *server) scanValues(req *Object) []any {
	state := sv.storage(req).State()
	ns, _ := req.Get("namespace")
	pre, _ := req.Get("prefix")
	namespace, prefix := checkName("namespace", ns), checkName("prefix", pre)
	scope, _ := req.Get("scope")
	keys := []string{}
	for k := range state.values {
		if k.scopeJSON() == scope && k.ns == namespace && strings.HasPrefix(k.key, prefix) {
			keys = append(keys, k.key)
		}
	}
	sort.Strings(keys)
	rows := make([]any, len(keys))
	for i, key := range keys {
		at := slot{scope != nil, "", namespace, key}
		if scope != nil {
			at.scope = scope.(string)
		}
		rows[i] = []any{key, valueJSON(state.values[at])}
	}
	return rows
}

func (sv *server) dispatch(req *Object) any {
	op, _ := str(req, "op")
	switch op {
	case "hello":
		if p, _ := req.Get("protocol"); p != Number("1") {
			Refuse("invalid_payload", "this backend speaks protocol 1")
		}
		root, ok := str(req, "root")
		if !ok {
			Refuse("invalid_payload", "hello names a root directory")
		}
		if sv.repo != nil {
			sv.repo.Close()
		}
		sv.repo, sv.handles = nil, map[int64]Storage{}
		sv.repo = sv.open(root)
		return O{{"protocol", 1}, {"name", sv.name}, {"fork", false}}
	case "create":
		return sv.opened(sv.repository().Create(sv.session(req)))
	case "open":
		return sv.opened(sv.repository().Open(sv.session(req)))
	case "list":
		ids := sv.repository().List()
		out := make([]any, len(ids))
		for i, id := range ids {
			out[i] = id
		}
		return out
	case "delete":
		sv.repository().Delete(sv.session(req))
		return nil
	case "close_repository":
		sv.repository().Close()
		return nil
	case "commit":
		h := sv.storage(req)
		h.State() // `closed` before any other check (LIFE-2)
		now, _ := req.Get("now")
		t, _ := isInt(now)
		w, _ := req.Get("writes")
		return h.Commit(w, t)
	case "get_value":
		state := sv.storage(req).State()
		a, _ := req.Get("address")
		ao, _ := a.(*Object)
		if r, ok := state.values[addressOf(ao, "address")]; ok {
			return valueJSON(r)
		}
		return nil
	case "scan_values":
		return sv.scanValues(req)
	case "read_list":
		return sv.readList(req)
	case "get_entry":
		state := sv.storage(req).State()
		id, _ := str(req, "entry_id")
		if e := state.entries[id]; e != nil {
			return entryJSON(e)
		}
		return nil
	case "get_usage":
		state := sv.storage(req).State()
		id, _ := str(req, "usage_id")
		if u := state.usage[id]; u != nil {
			return usageJSON(u)
		}
		return nil
	case "stats":
		return sv.storage(req).State().stats()
	case "snapshot":
		return sv.storage(req).State().snapshot()
	case "close":
		sv.storage(req).Close()
		return nil
	}
	Refuse("invalid_payload", "no op %q", op)
	return nil
}

func (sv *server) answer(line []byte) (out []byte) {
	parsed, err := ParseJSON(line)
	req, ok := parsed.(*Object)
	id, _ := req.Get("id")
	if _, isID := isInt(id); err != nil || !ok || !isID { // true, "1", 1.0 and a missing id included
		return Encode(O{{"id", nil}, {"error", O{{"code", "invalid_payload"}, {"message", "a request is one JSON object with an integer id"}, {"details", O{}}}}})
	}
	defer func() {
		if caught := recover(); caught != nil {
			code, message := "protocol_error", fmt.Sprintf("the backend panicked: %v\n%s", caught, debug.Stack())
			if r, ok := caught.(*Refusal); ok {
				code, message = r.Code, r.Message
			}
			out = Encode(O{{"id", id}, {"error", O{{"code", code}, {"message", message}, {"details", O{}}}}})
		}
	}()
	return Encode(O{{"id", id}, {"ok", sv.dispatch(req)}})
}

// Serve answers the protocol on stdin/stdout until stdin closes, then closes the repository
// and exits 0.  name is what `hello` answers; open makes the repository over a hello's root
// (the one before it closed first), refusing with `io_error` when it cannot.
func Serve(name string, open func(root string) Repository) {
	sv := &server{name: name, open: open, handles: map[int64]Storage{}, nextHandle: 1}
	readLines(func(line []byte) {
		if err := writeOut(append(sv.answer(line), '\n')); err != nil {
			// stdout is the protocol's: nothing else may go there; say why on stderr and stop
			fmt.Fprintf(os.Stderr, "%s: cannot write a response to stdout: %v\n", name, err)
			os.Exit(2)
		}
	})
	if sv.repo != nil {
		sv.repo.Close()
	}
	os.Exit(0)
}

// writeOut sends one response with one write system call (more only if the pipe takes part
// of it), waiting out EAGAIN if a parent left the pipe non-blocking.
func writeOut(data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(1, data)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			waitFd(1, true)
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func waitFd(fd int, write bool) {
	var set syscall.FdSet
	set.Bits[fd/64] |= 1 << (uint(fd) % 64)
	if write {
		syscall.Select(fd+1, nil, &set, nil, nil)
	} else {
		syscall.Select(fd+1, &set, nil, nil, nil)
	}
}

// readLine reads stdin up to the next newline with plain read calls (no Go poller, no
// buffering past what the kernel hands over); io EOF is reported as ok=false.
func readLines(handle func([]byte)) {
	var pending []byte
	chunk := make([]byte, 1<<16)
	for {
		for {
			at := bytes.IndexByte(pending, '\n')
			if at < 0 {
				break
			}
			line := pending[:at]
			pending = pending[at+1:]
			if len(bytes.TrimSpace(line)) > 0 {
				handle(line)
			}
		}
		n, err := syscall.Read(0, chunk)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			waitFd(0, false)
			continue
		}
		if err != nil || n == 0 {
			return
		}
		pending = append(pending, chunk[:n]...)
	}
}
