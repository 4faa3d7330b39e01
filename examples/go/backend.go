// A scoped-session backend in Go, speaking scopecheck's process protocol (docs/protocol.md) on
// stdin/stdout, standard library only:
//
//	cd examples/go && go build -o /tmp/scopecheck-go-backend . && cd ../..
//	scopecheck validate --exec /tmp/scopecheck-go-backend
//
// The protocol -- JSON, the contract's checks, a Session's state, the request loop -- is the
// package scopecheck-example/protocol (protocol/), which the store backends under stores/
// share; this file is the store: the same layout and durability as examples/node/backend.js.
// One JSON-lines log per Session under the root, `<encodeURIComponent(id)>.log`, one line per
// transaction {"s": first seq, "t": timestamp, "w": [writes in their wire form]}.  Payloads are
// kept as the JSON text they arrive in.  A commit appends its line and fsyncs before it
// answers; create fsyncs the new file and the directory, delete fsyncs the directory; open cuts
// a torn last line off, durably.  A failed append or fsync is cut back; after a failed fsync or
// cut the handle refuses writes (`unusable`) until the Session is opened again.  Every I/O
// error is answered as `io_error`.  A short write is written on by (*os.File).Write itself,
// which returns the error of the write after it (a disk filling up: ENOSPC) with the count of
// the bytes it stored.
//
// `--no-cut-back` plants a bug for the checks: a failed append is left in the file and the
// handle stays usable, so the next commit appends its line after the bytes the failed one
// stored.
// `--strict-tail` plants a bug in reading alone: open refuses a torn last line as corrupt
// instead of cutting it off, so a crash in the middle of an append leaves a Session no one
// can open again (CRASH-FS-1), on a disk that holds every acknowledged commit.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"scopecheck-example/protocol"
)

// noCutBack and strictTail are the planted bugs of `--no-cut-back` and `--strict-tail` (above).
var (
	noCutBack  = hasFlag("--no-cut-back")
	strictTail = hasFlag("--strict-tail")
)

func hasFlag(name string) bool {
	for _, arg := range os.Args[1:] {
		if arg == name {
			return true
		}
	}
	return false
}

const suffix = ".log"

type Handle struct {
	repo     *Repository
	id, path string
	state    *protocol.State
	file     *os.File
	size     int64
	closed   bool
	unusable string
}

// State is the Session's state; a closed handle refuses (LIFE-2).
func (h *Handle) State() *protocol.State {
	if h.closed {
		protocol.Refuse("closed", "storage is closed")
	}
	return h.state
}

// Commit appends the commit's line and fsyncs it before it is acknowledged.
func (h *Handle) Commit(raw any, now int64) []any {
	return h.State().Commit(raw, now, h.unusable, func(record []byte) {
		line := append(record, '\n')
		if _, err := h.file.Write(line); err != nil {
			if !noCutBack {
				h.cutBack(err)
			}
			protocol.IOError("append to "+h.id, err)
		}
		if err := h.file.Sync(); err != nil {
			h.cutBack(err)                                     // the failed commit must not come back after a restart
			h.unusable = fmt.Sprintf("fsync failed (%v)", err) // the data may be gone: never retry blind
			protocol.IOError("fsync of "+h.id, err)
		}
		h.size += int64(len(line))
	})
}

func (h *Handle) cutBack(cause error) {
	if err := h.file.Truncate(h.size); err == nil {
		err = h.file.Sync()
		if err == nil {
			return
		}
	}
	h.unusable = fmt.Sprintf("a failed append could not be cut back (%v)", cause)
}

func (h *Handle) Close() {
	if h.closed {
		return
	}
	h.closed = true
	h.file.Close()
	delete(h.repo.open, h.id)
}

type Repository struct {
	root string
	open map[string]*Handle
}

func newRepository(root string) *Repository {
	if err := os.MkdirAll(root, 0o755); err != nil {
		protocol.IOError("create the root", err)
	}
	return &Repository{root, map[string]*Handle{}}
}

func (r *Repository) path(id string) string {
	return filepath.Join(r.root, protocol.FileName(id, suffix))
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		protocol.IOError("stat "+path, err)
	}
	return err == nil
}

func (r *Repository) List() []string {
	names, err := os.ReadDir(r.root)
	if err != nil {
		protocol.IOError("list the root", err)
	}
	ids := []string{}
	for _, n := range names {
		if id, ok := protocol.SessionOf(n.Name(), suffix); ok && !n.IsDir() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids) // UTF-8 byte order is code-point order
	return ids
}

func (r *Repository) Create(id string) protocol.Storage {
	path := r.path(id)
	if exists(path) {
		protocol.Refuse("already_exists", "session %s exists", id)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		protocol.IOError("create "+id, err)
	}
	if err = f.Sync(); err == nil {
		err = protocol.SyncDir(r.root)
	}
	if err != nil {
		f.Close()
		protocol.IOError("create "+id, err)
	}
	return r.handle(id, path, protocol.NewState(), f, 0)
}

func (r *Repository) load(id, path string) *protocol.State {
	content, err := os.ReadFile(path)
	if err != nil {
		protocol.IOError("read "+id, err)
	}
	end := bytes.LastIndexByte(content, '\n') + 1
	if end < len(content) && strictTail {
		protocol.Refuse("corrupt", "%s ends in a torn line", id)
	}
	if end < len(content) { // a torn last line: that commit was never acknowledged
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			if err = f.Truncate(int64(end)); err == nil {
				err = f.Sync()
			}
			f.Close()
		}
		if err != nil {
			protocol.IOError("repair "+id, err)
		}
	}
	state := protocol.NewState()
	for n, line := range bytes.Split(content[:end], []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		if !state.ApplyRecord(line) {
			protocol.Refuse("corrupt", "%s line %d is not a transaction", id, n+1)
		}
	}
	return state
}

func (r *Repository) Open(id string) protocol.Storage {
	path := r.path(id)
	if !exists(path) {
		protocol.Refuse("not_found", "no session %s", id)
	}
	if r.open[id] != nil {
		protocol.Refuse("already_open", "session %s is open", id)
	}
	// A create that failed after making the file leaves it behind: make its name durable
	// before anything is acknowledged on it.
	if err := protocol.SyncDir(r.root); err != nil {
		protocol.IOError("open "+id, err)
	}
	state := r.load(id, path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		protocol.IOError("open "+id, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		protocol.IOError("open "+id, err)
	}
	return r.handle(id, path, state, f, info.Size())
}

func (r *Repository) handle(id, path string, state *protocol.State, f *os.File, size int64) *Handle {
	h := &Handle{repo: r, id: id, path: path, state: state, file: f, size: size}
	r.open[id] = h
	return h
}

func (r *Repository) Delete(id string) {
	if r.open[id] != nil {
		protocol.Refuse("already_open", "session %s is open", id)
	}
	path := r.path(id)
	if !exists(path) {
		protocol.Refuse("not_found", "no session %s", id)
	}
	if err := syscall.Unlink(path); err != nil {
		protocol.IOError("delete "+id, err)
	}
	if err := protocol.SyncDir(r.root); err != nil {
		protocol.IOError("delete "+id, err)
	}
}

func (r *Repository) Close() {
	for _, h := range r.open {
		h.Close()
	}
}

func main() {
	protocol.Serve("go-backend", func(root string) protocol.Repository { return newRepository(root) })
}
