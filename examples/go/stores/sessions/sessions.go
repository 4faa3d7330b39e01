// Package sessions is the Session semantics every Go store backend here shares, the Go
// counterpart of examples/stores/sessions.py: the store keeps one record per commit.
//
// A store backend says only how its store keeps a Session's records (a Log: Records in commit
// order, Append as one atomic put or transaction, Close) and how it makes and opens the store
// of one Session (a Store: Build and Connect).  The values, lists, entries, usage, retirements
// and the one seq counter are the protocol package's State, rebuilt on every open by applying
// the records in order; a record is State.Commit's: {"s": first seq, "t": timestamp, "w":
// [writes in their wire form]}.  So whatever a crash does to a Session is what the store did to
// its records: the verdict is the store's (docs/findings.md).
//
// Files: <root>/<encodeURIComponent(id)><suffix>, a file or a directory.  A Session is built
// aside (….new) and renamed into place, and deleted by renaming it away (….gone) before its
// files are removed, the root fsynced after each rename: a crash never leaves half a Session
// under its name (CRASH-FS-6), and leftovers are removed when the repository is opened.  A
// store's own error, or a panic of the store's code, is answered `io_error`, except a failed
// append: its commit fails with `outcome_unknown` (the store's own reading decides whether it
// was kept, CRASH-FS-14), and the handle refuses commits with `unusable` until the
// Session is opened again (CRASH-FS-10).
package sessions

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"scopecheck-example/protocol"
)

// Log is how a store keeps one Session's records.
type Log interface {
	Records() ([][]byte, error) // every record, in commit order
	Append(record []byte) error // one atomic put or transaction
	Close() error
}

// Store makes and opens the store of one Session.
type Store interface {
	Suffix() string                   // the end of a Session's file or directory name
	Build(path string) error          // make an empty store at path and close it
	Connect(path string) (Log, error) // open the store at path
}

// leftovers are the ends of a create or a delete a crash cut short.
var leftovers = []string{".new", ".gone"}

// Serve answers the process protocol with the Sessions kept in store; durable also fsyncs a
// Session's directory after the store made its files there, before it is renamed into place.
func Serve(name string, store Store, durable bool) {
	protocol.Serve(name, func(root string) protocol.Repository { return Open(root, store, durable) })
}

// Repository is the Sessions under one root.
type Repository struct {
	root     string
	store    Store
	durable  bool
	sessions map[string]bool
	open     map[string]*Handle
}

// Open is the repository over root: made if missing, leftovers of a create or a delete that
// a crash cut short removed, the Sessions listed.
func Open(root string, store Store, durable bool) *Repository {
	r := &Repository{root, store, durable, map[string]bool{}, map[string]*Handle{}}
	call("open the store", "", func() error {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		names, err := os.ReadDir(root)
		if err != nil {
			return err
		}
		for _, n := range names {
			for _, end := range leftovers {
				if strings.HasSuffix(n.Name(), store.Suffix()+end) {
					if err := os.RemoveAll(filepath.Join(root, n.Name())); err != nil {
						return err
					}
				}
			}
			if id, ok := protocol.SessionOf(n.Name(), store.Suffix()); ok {
				r.sessions[id] = true
			}
		}
		return nil
	})
	return r
}

// call runs one step of the store; its error, or a panic of the store's code, is `io_error`.
func call(what, id string, step func() error) {
	if err := safely(step); err != nil {
		if id != "" {
			what = fmt.Sprintf("%s %q", what, id)
		}
		protocol.IOError(what, err)
	}
}

func safely(step func() error) (err error) {
	defer func() {
		if caught := recover(); caught != nil {
			if refusal, ok := caught.(*protocol.Refusal); ok {
				panic(refusal)
			}
			err = fmt.Errorf("the store panicked: %v", caught)
		}
	}()
	return step()
}

func (r *Repository) path(id string) string {
	return filepath.Join(r.root, protocol.FileName(id, r.store.Suffix()))
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func (r *Repository) List() []string {
	ids := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids) // UTF-8 byte order is code-point order
	return ids
}

func (r *Repository) Create(id string) protocol.Storage {
	path := r.path(id)
	if r.sessions[id] || exists(path) {
		r.sessions[id] = true // made by a create that then failed
		protocol.Refuse("already_exists", "session %q exists", id)
	}
	var log Log
	call("create", id, func() error {
		if err := os.RemoveAll(path + ".new"); err != nil {
			return err
		}
		if err := r.store.Build(path + ".new"); err != nil {
			return err
		}
		if info, err := os.Stat(path + ".new"); err == nil && info.IsDir() && r.durable {
			if err := protocol.SyncDir(path + ".new"); err != nil { // the names of the store's files
				return err
			}
		}
		if err := os.Rename(path+".new", path); err != nil {
			return err
		}
		if err := protocol.SyncDir(r.root); err != nil {
			return err
		}
		var err error
		log, err = r.store.Connect(path)
		return err
	})
	return r.attach(id, protocol.NewState(), log)
}

func (r *Repository) Open(id string) protocol.Storage {
	if !r.sessions[id] {
		protocol.Refuse("not_found", "no session %q", id)
	}
	if r.open[id] != nil {
		protocol.Refuse("already_open", "session %q is open", id)
	}
	var log Log
	call("open", id, func() (err error) {
		log, err = r.store.Connect(r.path(id))
		return err
	})
	state, refused := protocol.NewState(), true
	defer func() {
		if refused {
			safely(log.Close)
		}
	}()
	var records [][]byte
	call("read", id, func() (err error) {
		records, err = log.Records()
		return err
	})
	for n, record := range records {
		if !state.ApplyRecord(record) {
			protocol.Refuse("corrupt", "%q: record %d is not a transaction", id, n)
		}
	}
	refused = false
	return r.attach(id, state, log)
}

func (r *Repository) attach(id string, state *protocol.State, log Log) *Handle {
	r.sessions[id] = true
	h := &Handle{repo: r, id: id, state: state, log: log}
	r.open[id] = h
	return h
}

func (r *Repository) Delete(id string) {
	if r.open[id] != nil {
		protocol.Refuse("already_open", "session %q is open", id)
	}
	if !r.sessions[id] {
		protocol.Refuse("not_found", "no session %q", id)
	}
	path := r.path(id)
	defer func() {
		if !exists(path) { // renamed away: gone, even if a later step failed
			delete(r.sessions, id)
		}
	}()
	call("delete", id, func() error {
		if err := os.Rename(path, path+".gone"); err != nil {
			return err
		}
		if err := protocol.SyncDir(r.root); err != nil {
			return err
		}
		return os.RemoveAll(path + ".gone")
	})
}

// Close closes every handle; the first store error is answered once all are closed.
func (r *Repository) Close() {
	var first error
	for _, h := range r.open {
		if err := h.close(); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		protocol.IOError("close the store", first)
	}
}

// Handle is one open Session.
type Handle struct {
	repo     *Repository
	id       string
	state    *protocol.State
	log      Log
	closed   bool
	unusable string
}

func (h *Handle) State() *protocol.State {
	if h.closed {
		protocol.Refuse("closed", "storage is closed")
	}
	return h.state
}

// Commit appends the commit's record to the store: acknowledged once the store said it kept
// it; a store that failed leaves the outcome unknown, so the handle refuses commits after it.
func (h *Handle) Commit(raw any, now int64) []any {
	return h.State().Commit(raw, now, h.unusable, func(record []byte) {
		if err := safely(func() error { return h.log.Append(record) }); err != nil {
			h.unusable = fmt.Sprintf("a write to the store failed (%v)", err)
			// What the store kept of a put that failed is the store's to say (CRASH-FS-14).
			protocol.Refuse("outcome_unknown", "commit to %q, kept or not: %v", h.id, err)
		}
	})
}

func (h *Handle) Close() {
	if err := h.close(); err != nil {
		protocol.IOError(fmt.Sprintf("close %q", h.id), err)
	}
}

func (h *Handle) close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	delete(h.repo.open, h.id)
	return safely(h.log.Close)
}
