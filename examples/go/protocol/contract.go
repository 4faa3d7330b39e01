package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// -- refusals and field access -----------------------------------------------------------------

// Refusal is an answer with one of the contract's codes (docs/protocol.md): a backend refuses
// a request by panicking with one, and the request's answer is that error.
type Refusal struct{ Code, Message string }

func (r *Refusal) Error() string { return r.Message }

// Refuse answers the request being served with the error code.
func Refuse(code, format string, args ...any) { panic(&Refusal{code, fmt.Sprintf(format, args...)}) }

// IOError answers the request with `io_error`: a write, fsync, read or directory operation
// failed (naming the errno, so a report shows which fault it was).
func IOError(what string, err error) {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		Refuse("io_error", "%s: %s (%s)", what, errno.Error(), errnoName(errno))
	}
	Refuse("io_error", "%s: %v", what, err)
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EIO:
		return "EIO"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	}
	return "errno " + strconv.Itoa(int(e))
}

func str(o *Object, k string) (string, bool) {
	v, _ := o.Get(k)
	s, ok := v.(string)
	return s, ok
}

// optStr is a string or null (nil); ok is false for anything else.
func optStr(o *Object, k string) (any, bool) {
	v, _ := o.Get(k)
	switch v.(type) {
	case nil, string:
		return v, true
	}
	return nil, false
}

// isInt: a JSON number written without fraction or exponent (what Python reads as an int).
func isInt(v any) (int64, bool) {
	n, ok := v.(Number)
	if !ok || strings.ContainsAny(string(n), ".eE") {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil { // beyond int64: still an int, as far out as it can be
		if strings.HasPrefix(string(n), "-") {
			return -1 << 63, true
		}
		return 1<<63 - 1, true
	}
	return i, true
}

func need(o *Object, k string) string {
	s, ok := str(o, k)
	if !ok {
		Refuse("invalid_payload", "%s must be a string", k)
	}
	return s
}

// -- writes and checks (the contract's, in the model's order: TX-5) ----------------------------

type slot struct {
	scoped         bool
	scope, ns, key string
}

func (s slot) scopeJSON() any {
	if !s.scoped {
		return nil
	}
	return s.scope
}

type write struct {
	kind     string
	at       slot
	value    string // set: value, append: element
	tag      any    // append: string or nil
	id       string // entry, usage
	ref      any    // entry: parent_id, usage: entry_id
	typ      string // entry
	payload  string // entry payload, usage row
	adjust   bool   // usage
	details  any    // usage: string or nil
	retiring string // retire
	raw      *Object
}

func addressOf(o *Object, where string) slot {
	scope, ok := optStr(o, "scope")
	ns, ok2 := str(o, "namespace")
	key, ok3 := str(o, "key")
	if o == nil || !ok || !ok2 || !ok3 {
		Refuse("invalid_payload", "%s: expected an address {scope, namespace, key}", where)
	}
	if scope == nil {
		return slot{false, "", ns, key}
	}
	return slot{true, scope.(string), ns, key}
}

// decodeWrite reads one write in its wire form: the address fields sit in the write itself.
func decodeWrite(o *Object, i int) write {
	where := fmt.Sprintf("writes[%d]", i)
	w := write{raw: o}
	w.kind, _ = str(o, "kind")
	var ok bool
	switch w.kind {
	case "set", "append":
		w.at = addressOf(o, where)
		field := map[string]string{"set": "value", "append": "element"}[w.kind]
		if w.value, ok = str(o, field); !ok {
			Refuse("invalid_payload", "%s.%s must be JSON text", where, field)
		}
		if w.kind == "append" {
			if w.tag, ok = optStr(o, "tag"); !ok {
				Refuse("invalid_payload", "%s.tag must be a string or null", where)
			}
		}
	case "delete", "drop":
		w.at = addressOf(o, where)
	case "entry":
		w.id, w.typ, w.payload = need(o, "id"), need(o, "type"), need(o, "payload")
		if w.ref, ok = optStr(o, "parent_id"); !ok {
			Refuse("invalid_payload", "%s.parent_id must be a string or null", where)
		}
	case "usage":
		w.id, w.payload = need(o, "id"), need(o, "usage")
		w.ref, ok = optStr(o, "entry_id")
		d, ok2 := optStr(o, "details")
		a, _ := o.Get("adjustment")
		b, ok3 := a.(bool)
		if !ok || !ok2 || !ok3 {
			Refuse("invalid_payload", "%s: a usage write's entry_id, details or adjustment has the wrong type", where)
		}
		w.details, w.adjust = d, b
	case "retire":
		w.retiring = need(o, "scope")
	case "not_a_write":
	default:
		Refuse("invalid_payload", "%s: unknown write kind %q", where, w.kind)
	}
	return w
}

func checkShape(raw any) []write {
	items, ok := raw.([]any)
	if !ok {
		Refuse("invalid_transaction", "commit takes a list of writes")
	}
	writes := make([]write, len(items))
	for i, item := range items { // (1) every item is a write
		o, ok := item.(*Object)
		if kind, _ := str(o, "kind"); !ok || kind == "not_a_write" {
			Refuse("invalid_transaction", "item %d is not a write", i)
		}
		writes[i] = decodeWrite(o, i)
	}
	scope, scoped, sessionAt := "", false, -1 // (2) session writes only, or one ephemeral scope
	for i, w := range writes {
		addressed := w.kind == "set" || w.kind == "delete" || w.kind == "append" || w.kind == "drop"
		if addressed && w.at.scoped {
			if !scoped {
				scope, scoped = w.at.scope, true
			} else if w.at.scope != scope {
				Refuse("invalid_transaction", "write %d is in another ephemeral scope (TX-3)", i)
			}
		} else if sessionAt < 0 {
			sessionAt = i
		}
		if scoped && sessionAt >= 0 {
			Refuse("invalid_transaction", "session and ephemeral writes mixed in one transaction (TX-2)")
		}
	}
	return writes
}

func checkReferences(writes []write, st *State) {
	ids, entries := map[string]bool{}, map[string]bool{}
	for _, w := range writes { // (3) ids and references, in write order
		if w.kind != "entry" && w.kind != "usage" {
			continue
		}
		if ids[w.id] || st.entries[w.id] != nil || st.usage[w.id] != nil {
			Refuse("duplicate_id", "id %s is already used", w.id)
		}
		if ref, ok := w.ref.(string); ok && !entries[ref] && st.entries[ref] == nil {
			Refuse("unknown_reference", "%s %s names entry %s, which is not an earlier entry", w.kind, w.id, ref)
		}
		if w.kind == "entry" {
			entries[w.id] = true
		}
		ids[w.id] = true
	}
}

func checkName(what string, v any) string {
	s, ok := v.(string)
	if !ok || strings.IndexByte(s, 0) >= 0 {
		Refuse("invalid_address", "%s must be a string without NUL", what)
	}
	return s
}

func checkSessionID(v any) string {
	s, ok := v.(string)
	if !ok || s == "" || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		Refuse("invalid_session_id", "session id must be a non-empty well-formed string without NUL")
	}
	return s
}
