// A scoped-session backend in Go, speaking scopecheck's process protocol (docs/protocol.md) on
// stdin/stdout, standard library only:
//
//	cd examples/go && go build -o /tmp/scopecheck-go-backend . && cd ../..
//	scopecheck validate --exec /tmp/scopecheck-go-backend
//
// The same layout and durability as examples/node/backend.js: one JSON-lines log per Session
// under the root, `<encodeURIComponent(id)>.log`, one line per transaction {"s": first seq,
// "t": timestamp, "w": [writes in their wire form]}.  Payloads are kept as the JSON text they
// arrive in.  A commit appends its line and fsyncs before it answers; create fsyncs the new file
// and the directory, delete fsyncs the directory; open cuts a torn last line off, durably.  A
// failed append or fsync is cut back; after a failed fsync or cut the handle refuses writes
// (`unusable`) until the Session is opened again.  Every I/O error is answered as `io_error`.
// A short write is written on by (*os.File).Write itself, which returns the error of the write
// after it (a disk filling up: ENOSPC) with the count of the bytes it stored.
//
// `--no-cut-back` plants a bug for the checks: a failed append is left in the file and the
// handle stays usable, so the next commit appends its line after the bytes the failed one
// stored.
//
// JSON is read and written by hand (below), not with encoding/json: the checks send strings
// holding a lone UTF-16 surrogate as a `\ud800` escape, which encoding/json would turn into
// U+FFFD (making two different invalid ids one valid one).  Strings are kept as WTF-8 (a lone
// surrogate as its 3-byte generalized UTF-8 form), so utf8.ValidString tells a well-formed id,
// byte order is code-point order, and the writer escapes a surrogate back to `\udXXX`.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

const defaultLimit, maxLimit = 1000, 10000

// noCutBack is the planted bug of `--no-cut-back` (above).
var noCutBack = hasFlag("--no-cut-back")

func hasFlag(name string) bool {
	for _, arg := range os.Args[1:] {
		if arg == name {
			return true
		}
	}
	return false
}

// -- JSON --------------------------------------------------------------------------------------

// Number is a JSON number as its literal text; Object keeps its keys in order.
type Number string
type Object struct {
	keys []string
	vals map[string]any
}
type KV struct {
	K string
	V any
}
type O []KV // an object to write, in this order

func (o *Object) Get(k string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[k]
	return v, ok
}

type parser struct {
	b []byte
	i int
}

var errSyntax = errors.New("not JSON")

func parseJSON(b []byte) (v any, err error) {
	p := &parser{b: b}
	p.ws()
	if v, err = p.value(0); err != nil {
		return nil, err
	}
	if p.ws(); p.i != len(p.b) {
		return nil, errSyntax
	}
	return v, nil
}

func (p *parser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) lit(s string, v any) (any, error) {
	if !bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		return nil, errSyntax
	}
	p.i += len(s)
	return v, nil
}

func (p *parser) value(depth int) (any, error) {
	if p.i >= len(p.b) || depth > 500 {
		return nil, errSyntax
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		o := &Object{vals: map[string]any{}}
		if p.ws(); p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return o, nil
		}
		for {
			if p.ws(); p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, errSyntax
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			if p.ws(); p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, errSyntax
			}
			p.i++
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[k]; !dup {
				o.keys = append(o.keys, k)
			}
			o.vals[k] = v
			if p.ws(); p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == '}' {
				p.i++
				return o, nil
			}
			return nil, errSyntax
		}
	case c == '[':
		p.i++
		a := []any{}
		if p.ws(); p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return a, nil
		}
		for {
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			if p.ws(); p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == ']' {
				p.i++
				return a, nil
			}
			return nil, errSyntax
		}
	case c == '"':
		return p.str()
	case c == 't':
		return p.lit("true", true)
	case c == 'f':
		return p.lit("false", false)
	case c == 'n':
		return p.lit("null", nil)
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		for p.i < len(p.b) && strings.IndexByte("+-0123456789.eE", p.b[p.i]) >= 0 {
			p.i++
		}
		text := string(p.b[start:p.i])
		if _, err := strconv.ParseFloat(text, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, errSyntax
		}
		return Number(text), nil
	}
	return nil, errSyntax
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

// str reads a string; a lone surrogate escape becomes its 3-byte WTF-8 form.
func (p *parser) str() (string, error) {
	p.i++ // the opening quote
	var out []byte
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.b) {
			break
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", errSyntax
			}
			if r >= 0xD800 && r < 0xDC00 && p.i+6 <= len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
				save := p.i
				p.i += 2
				if low, ok := p.hex4(); ok && low >= 0xDC00 && low < 0xE000 {
					out = utf8.AppendRune(out, 0x10000+(r-0xD800)<<10+(low-0xDC00))
					continue
				}
				p.i = save
			}
			if r >= 0xD800 && r < 0xE000 { // lone: WTF-8, which utf8.ValidString refuses
				out = append(out, byte(0xE0|r>>12), byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
			} else {
				out = utf8.AppendRune(out, r)
			}
		default:
			return "", errSyntax
		}
	}
	return "", errSyntax
}

func writeJSON(buf *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case int64:
		buf.WriteString(strconv.FormatInt(x, 10))
	case int:
		buf.WriteString(strconv.Itoa(x))
	case float64:
		buf.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case Number:
		buf.WriteString(string(x))
	case string:
		writeString(buf, x)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSON(buf, e)
		}
		buf.WriteByte(']')
	case *Object:
		buf.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			writeJSON(buf, x.vals[k])
		}
		buf.WriteByte('}')
	case O:
		buf.WriteByte('{')
		for i, kv := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, kv.K)
			buf.WriteByte(':')
			writeJSON(buf, kv.V)
		}
		buf.WriteByte('}')
	default:
		panic(fmt.Sprintf("cannot write %T as JSON", v))
	}
}

func writeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf.WriteByte('\\')
				buf.WriteByte(c)
			case c == '\n':
				buf.WriteString(`\n`)
			case c < 0x20 || c == 0x7f:
				fmt.Fprintf(buf, `\u%04x`, c)
			default:
				buf.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if i+2 < len(s) && c == 0xED && s[i+1] >= 0xA0 && s[i+1] <= 0xBF && s[i+2]&0xC0 == 0x80 {
				fmt.Fprintf(buf, `\u%04x`, 0xD000|rune(s[i+1]&0x3F)<<6|rune(s[i+2]&0x3F))
				i += 3
			} else {
				buf.WriteString(`\ufffd`)
				i++
			}
			continue
		}
		buf.WriteString(s[i : i+size])
		i += size
	}
	buf.WriteByte('"')
}

func encode(v any) []byte {
	var buf bytes.Buffer
	writeJSON(&buf, v)
	return buf.Bytes()
}

// -- refusals and field access -----------------------------------------------------------------

type Refusal struct{ Code, Message string }

func (r *Refusal) Error() string { return r.Message }

func refuse(code, format string, args ...any) { panic(&Refusal{code, fmt.Sprintf(format, args...)}) }

func ioError(what string, err error) {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		refuse("io_error", "%s: %s (%s)", what, errno.Error(), errnoName(errno))
	}
	refuse("io_error", "%s: %v", what, err)
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
		refuse("invalid_payload", "%s must be a string", k)
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
		refuse("invalid_payload", "%s: expected an address {scope, namespace, key}", where)
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
			refuse("invalid_payload", "%s.%s must be JSON text", where, field)
		}
		if w.kind == "append" {
			if w.tag, ok = optStr(o, "tag"); !ok {
				refuse("invalid_payload", "%s.tag must be a string or null", where)
			}
		}
	case "delete", "drop":
		w.at = addressOf(o, where)
	case "entry":
		w.id, w.typ, w.payload = need(o, "id"), need(o, "type"), need(o, "payload")
		if w.ref, ok = optStr(o, "parent_id"); !ok {
			refuse("invalid_payload", "%s.parent_id must be a string or null", where)
		}
	case "usage":
		w.id, w.payload = need(o, "id"), need(o, "usage")
		w.ref, ok = optStr(o, "entry_id")
		d, ok2 := optStr(o, "details")
		a, _ := o.Get("adjustment")
		b, ok3 := a.(bool)
		if !ok || !ok2 || !ok3 {
			refuse("invalid_payload", "%s: a usage write's entry_id, details or adjustment has the wrong type", where)
		}
		w.details, w.adjust = d, b
	case "retire":
		w.retiring = need(o, "scope")
	case "not_a_write":
	default:
		refuse("invalid_payload", "%s: unknown write kind %q", where, w.kind)
	}
	return w
}

func checkShape(raw any) []write {
	items, ok := raw.([]any)
	if !ok {
		refuse("invalid_transaction", "commit takes a list of writes")
	}
	writes := make([]write, len(items))
	for i, item := range items { // (1) every item is a write
		o, ok := item.(*Object)
		if kind, _ := str(o, "kind"); !ok || kind == "not_a_write" {
			refuse("invalid_transaction", "item %d is not a write", i)
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
				refuse("invalid_transaction", "write %d is in another ephemeral scope (TX-3)", i)
			}
		} else if sessionAt < 0 {
			sessionAt = i
		}
		if scoped && sessionAt >= 0 {
			refuse("invalid_transaction", "session and ephemeral writes mixed in one transaction (TX-2)")
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
			refuse("duplicate_id", "id %s is already used", w.id)
		}
		if ref, ok := w.ref.(string); ok && !entries[ref] && st.entries[ref] == nil {
			refuse("unknown_reference", "%s %s names entry %s, which is not an earlier entry", w.kind, w.id, ref)
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
		refuse("invalid_address", "%s must be a string without NUL", what)
	}
	return s
}

func checkSessionID(v any) string {
	s, ok := v.(string)
	if !ok || s == "" || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		refuse("invalid_session_id", "session id must be a non-empty well-formed string without NUL")
	}
	return s
}

// -- one Session's state, rebuilt from its log -------------------------------------------------

type valueRec struct {
	seq   int64
	value string
}
type element struct {
	seq   int64
	value string
	tag   any
}
type entryRec struct {
	id, typ, payload string
	parent           any
	seq, timestamp   int64
}
type usageRec struct {
	id, usage       string
	entryID, detail any
	adjustment      bool
	seq             int64
}

type State struct {
	nextSeq int64
	values  map[slot]valueRec
	lists   map[slot][]element
	entries map[string]*entryRec
	usage   map[string]*usageRec
}

func newState() *State {
	return &State{1, map[slot]valueRec{}, map[slot][]element{}, map[string]*entryRec{}, map[string]*usageRec{}}
}

func (s *State) apply(writes []write, first, now int64) {
	for i, w := range writes {
		seq := first + int64(i)
		switch w.kind {
		case "set":
			s.values[w.at] = valueRec{seq, w.value}
		case "delete":
			delete(s.values, w.at)
		case "append":
			s.lists[w.at] = append(s.lists[w.at], element{seq, w.value, w.tag})
		case "drop":
			delete(s.lists, w.at)
		case "entry":
			s.entries[w.id] = &entryRec{w.id, w.typ, w.payload, w.ref, seq, now}
		case "usage":
			s.usage[w.id] = &usageRec{w.id, w.payload, w.ref, w.details, w.adjust, seq}
		case "retire":
			for k := range s.values {
				if k.scoped && k.scope == w.retiring {
					delete(s.values, k)
				}
			}
			for k := range s.lists {
				if k.scoped && k.scope == w.retiring {
					delete(s.lists, k)
				}
			}
		}
	}
	s.nextSeq = first + int64(len(writes))
}

func valueJSON(r valueRec) O { return O{{"seq", r.seq}, {"value", r.value}} }
func elementJSON(e element) O {
	return O{{"seq", e.seq}, {"value", e.value}, {"tag", e.tag}}
}
func entryJSON(e *entryRec) O {
	return O{{"id", e.id}, {"parent_id", e.parent}, {"type", e.typ}, {"payload", e.payload}, {"seq", e.seq}, {"timestamp", e.timestamp}}
}
func usageJSON(u *usageRec) O { // no timestamp: scopecheck/models/wire.py's usage record has none
	return O{{"id", u.id}, {"usage", u.usage}, {"entry_id", u.entryID}, {"adjustment", u.adjustment}, {"details", u.detail}, {"seq", u.seq}}
}

func number(v any) (int64, float64, bool) {
	n, ok := v.(Number)
	if !ok {
		return 0, 0, false
	}
	f, _ := strconv.ParseFloat(string(n), 64)
	i, _ := strconv.ParseInt(string(n), 10, 64)
	return i, f, true
}

var tokenFields = [][2]string{{"input", "input"}, {"output", "output"}, {"cache_read", "cacheRead"}, {"cache_write", "cacheWrite"}, {"total_tokens", "totalTokens"}}
var costFields = [][2]string{{"cost_input", "input"}, {"cost_output", "output"}, {"cost_cache_read", "cacheRead"}, {"cost_cache_write", "cacheWrite"}, {"cost_total", "total"}}

func (s *State) stats() O {
	rows := make([]*usageRec, 0, len(s.usage))
	for _, u := range s.usage {
		rows = append(rows, u)
	}
	sort.Slice(rows, func(a, b int) bool { return rows[a].seq < rows[b].seq })
	tokens, costs := make([]int64, len(tokenFields)), make([]float64, len(costFields))
	for _, row := range rows { // summed in seq order, as the model does (float sums depend on it)
		parsed, _ := parseJSON([]byte(row.usage))
		u, _ := parsed.(*Object)
		for i, f := range tokenFields {
			v, _ := u.Get(f[1])
			if n, _, ok := number(v); ok {
				tokens[i] += n
			}
		}
		c, _ := u.Get("cost")
		cost, _ := c.(*Object)
		for i, f := range costFields {
			v, _ := cost.Get(f[1])
			if _, x, ok := number(v); ok {
				costs[i] += x
			}
		}
	}
	usage := O{}
	for i, f := range tokenFields {
		usage = append(usage, KV{f[0], tokens[i]})
	}
	for i, f := range costFields {
		usage = append(usage, KV{f[0], costs[i]})
	}
	messages := int64(0)
	for _, e := range s.entries {
		if e.typ == "message" {
			messages++
		}
	}
	return O{{"message_count", messages}, {"usage", usage}}
}

func slotLess(a, b slot) bool { // session scope first, then scope id, namespace, key (byte order)
	if a.scoped != b.scoped {
		return !a.scoped
	}
	if a.scope != b.scope {
		return a.scope < b.scope
	}
	if a.ns != b.ns {
		return a.ns < b.ns
	}
	return a.key < b.key
}

func (s *State) snapshot() O {
	entries := make([]*entryRec, 0, len(s.entries))
	for _, e := range s.entries {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].seq < entries[b].seq })
	usage := make([]*usageRec, 0, len(s.usage))
	for _, u := range s.usage {
		usage = append(usage, u)
	}
	sort.Slice(usage, func(a, b int) bool { return usage[a].seq < usage[b].seq })
	entryRows, usageRows := []any{}, []any{}
	for _, e := range entries {
		entryRows = append(entryRows, entryJSON(e))
	}
	for _, u := range usage {
		usageRows = append(usageRows, usageJSON(u))
	}
	valueKeys, listKeys := []slot{}, []slot{}
	for k := range s.values {
		valueKeys = append(valueKeys, k)
	}
	for k, l := range s.lists {
		if len(l) > 0 { // a list with no element is left out
			listKeys = append(listKeys, k)
		}
	}
	sort.Slice(valueKeys, func(a, b int) bool { return slotLess(valueKeys[a], valueKeys[b]) })
	sort.Slice(listKeys, func(a, b int) bool { return slotLess(listKeys[a], listKeys[b]) })
	values, lists := []any{}, []any{}
	for _, k := range valueKeys {
		values = append(values, []any{k.scopeJSON(), k.ns, k.key, valueJSON(s.values[k])})
	}
	for _, k := range listKeys {
		elements := []any{}
		for _, e := range s.lists[k] {
			elements = append(elements, elementJSON(e))
		}
		lists = append(lists, []any{k.scopeJSON(), k.ns, k.key, elements})
	}
	return O{{"entries", entryRows}, {"usage", usageRows}, {"values", values}, {"lists", lists}, {"stats", s.stats()}}
}

// -- files -------------------------------------------------------------------------------------

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// fileName is encodeURIComponent(id) + ".log", as the Node example names its files.
func fileName(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String() + ".log"
}

func sessionOf(name string) (string, bool) {
	if !strings.HasSuffix(name, ".log") {
		return "", false
	}
	name = strings.TrimSuffix(name, ".log")
	var b []byte
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b = append(b, name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		n, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(n))
		i += 2
	}
	return string(b), true
}

type Handle struct {
	repo     *Repository
	id, path string
	state    *State
	file     *os.File
	size     int64
	closed   bool
	unusable string
}

func (h *Handle) open() *State {
	if h.closed {
		refuse("closed", "storage is closed")
	}
	return h.state
}

func (h *Handle) commit(raw any, now int64) []any {
	state := h.open()
	writes := checkShape(raw)
	// unusable after the one-scope rule and before ids, an empty commit included, as
	// scopecheck's JSONL backend (docs/protocol.md)
	if h.unusable != "" {
		refuse("unusable", "refusing writes until the Session is opened again: %s", h.unusable)
	}
	checkReferences(writes, state)
	if len(writes) == 0 {
		return []any{}
	}
	first := state.nextSeq
	items := make([]any, len(writes))
	for i, w := range writes {
		items[i] = w.raw
	}
	line := append(encode(O{{"s", first}, {"t", now}, {"w", items}}), '\n')
	if _, err := h.file.Write(line); err != nil {
		if !noCutBack {
			h.cutBack(err)
		}
		ioError("append to "+h.id, err)
	}
	if err := h.file.Sync(); err != nil {
		h.cutBack(err)                                     // the failed commit must not come back after a restart
		h.unusable = fmt.Sprintf("fsync failed (%v)", err) // the data may be gone: never retry blind
		ioError("fsync of "+h.id, err)
	}
	h.size += int64(len(line))
	state.apply(writes, first, now)
	done := make([]any, len(writes))
	for i := range writes {
		done[i] = O{{"seq", first + int64(i)}, {"timestamp", now}}
	}
	return done
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

func (h *Handle) close() {
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
		ioError("create the root", err)
	}
	return &Repository{root, map[string]*Handle{}}
}

func (r *Repository) path(id string) string { return filepath.Join(r.root, fileName(id)) }

func exists(path string) bool {
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		ioError("stat "+path, err)
	}
	return err == nil
}

func (r *Repository) list() []any {
	names, err := os.ReadDir(r.root)
	if err != nil {
		ioError("list the root", err)
	}
	ids := []string{}
	for _, n := range names {
		if id, ok := sessionOf(n.Name()); ok && !n.IsDir() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids) // UTF-8 byte order is code-point order
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

func (r *Repository) create(raw any) *Handle {
	id := checkSessionID(raw)
	path := r.path(id)
	if exists(path) {
		refuse("already_exists", "session %s exists", id)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		ioError("create "+id, err)
	}
	if err = f.Sync(); err == nil {
		err = syncDir(r.root)
	}
	if err != nil {
		f.Close()
		ioError("create "+id, err)
	}
	return r.handle(id, path, newState(), f, 0)
}

func (r *Repository) load(id, path string) *State {
	content, err := os.ReadFile(path)
	if err != nil {
		ioError("read "+id, err)
	}
	end := bytes.LastIndexByte(content, '\n') + 1
	if end < len(content) { // a torn last line: that commit was never acknowledged
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			if err = f.Truncate(int64(end)); err == nil {
				err = f.Sync()
			}
			f.Close()
		}
		if err != nil {
			ioError("repair "+id, err)
		}
	}
	state := newState()
	for n, line := range bytes.Split(content[:end], []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		parsed, err := parseJSON(line)
		record, _ := parsed.(*Object)
		s, okS := record.Get("s")
		t, okT := record.Get("t")
		w, _ := record.Get("w")
		items, okW := w.([]any)
		first, ok1 := isInt(s)
		now, ok2 := isInt(t)
		if err != nil || !okS || !okT || !okW || !ok1 || !ok2 {
			refuse("corrupt", "%s line %d is not a transaction", id, n+1)
		}
		writes := make([]write, len(items))
		for i, item := range items {
			o, _ := item.(*Object)
			writes[i] = decodeWrite(o, i)
		}
		state.apply(writes, first, now)
	}
	return state
}

func (r *Repository) openSession(raw any) *Handle {
	id := checkSessionID(raw)
	path := r.path(id)
	if !exists(path) {
		refuse("not_found", "no session %s", id)
	}
	if r.open[id] != nil {
		refuse("already_open", "session %s is open", id)
	}
	// A create that failed after making the file leaves it behind: make its name durable
	// before anything is acknowledged on it.
	if err := syncDir(r.root); err != nil {
		ioError("open "+id, err)
	}
	state := r.load(id, path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		ioError("open "+id, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		ioError("open "+id, err)
	}
	return r.handle(id, path, state, f, info.Size())
}

func (r *Repository) handle(id, path string, state *State, f *os.File, size int64) *Handle {
	h := &Handle{repo: r, id: id, path: path, state: state, file: f, size: size}
	r.open[id] = h
	return h
}

func (r *Repository) delete(raw any) {
	id := checkSessionID(raw)
	if r.open[id] != nil {
		refuse("already_open", "session %s is open", id)
	}
	path := r.path(id)
	if !exists(path) {
		refuse("not_found", "no session %s", id)
	}
	if err := syscall.Unlink(path); err != nil {
		ioError("delete "+id, err)
	}
	if err := syncDir(r.root); err != nil {
		ioError("delete "+id, err)
	}
}

func (r *Repository) close() {
	for _, h := range r.open {
		h.close()
	}
}

// -- the protocol ------------------------------------------------------------------------------

var (
	repo       *Repository
	handles    = map[int64]*Handle{}
	nextHandle = int64(1)
)

func storage(req *Object) *Handle {
	v, _ := req.Get("handle")
	n, _ := isInt(v)
	h := handles[n]
	if h == nil {
		refuse("invalid_payload", "no handle %v", v)
	}
	return h
}

func opened(h *Handle) O {
	n := nextHandle
	nextHandle++
	handles[n] = h
	return O{{"handle", n}, {"parent_session_id", nil}}
}

func repository() *Repository {
	if repo == nil {
		refuse("invalid_payload", "hello first")
	}
	return repo
}

func readList(req *Object) []any {
	state := storage(req).open()
	a, _ := req.Get("address")
	ao, _ := a.(*Object)
	at := addressOf(ao, "address")
	c, _ := req.Get("cursor") // checked in the model's order: cursor, order, limit, stop_at_tag
	cursor, isCursor := isInt(c)
	if c != nil && (!isCursor || cursor < 0) {
		refuse("invalid_query", "cursor must be a non-negative int or null")
	}
	order, _ := str(req, "order")
	if order != "asc" && order != "desc" {
		refuse("invalid_query", "order must be asc or desc")
	}
	limit := int64(defaultLimit)
	if l, _ := req.Get("limit"); l != nil {
		n, ok := isInt(l)
		if !ok || n < 1 {
			refuse("invalid_query", "limit must be a positive int")
		}
		if limit = n; limit > maxLimit {
			limit = maxLimit
		}
	}
	stop, _ := req.Get("stop_at_tag")
	if s, ok := stop.(string); stop != nil && (!ok || s == "") {
		refuse("invalid_query", "stop_at_tag must be a non-empty string or null")
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

func scanValues(req *Object) []any {
	state := storage(req).open()
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

func dispatch(req *Object) any {
	op, _ := str(req, "op")
	switch op {
	case "hello":
		if p, _ := req.Get("protocol"); p != Number("1") {
			refuse("invalid_payload", "this backend speaks protocol 1")
		}
		root, ok := str(req, "root")
		if !ok {
			refuse("invalid_payload", "hello names a root directory")
		}
		if repo != nil {
			repo.close()
		}
		repo, handles = nil, map[int64]*Handle{}
		repo = newRepository(root)
		return O{{"protocol", 1}, {"name", "go-backend"}, {"fork", false}}
	case "create":
		v, _ := req.Get("session")
		return opened(repository().create(v))
	case "open":
		v, _ := req.Get("session")
		return opened(repository().openSession(v))
	case "list":
		return repository().list()
	case "delete":
		v, _ := req.Get("session")
		repository().delete(v)
		return nil
	case "close_repository":
		repository().close()
		return nil
	case "commit":
		h := storage(req)
		now, _ := req.Get("now")
		t, _ := isInt(now)
		w, _ := req.Get("writes")
		return h.commit(w, t)
	case "get_value":
		state := storage(req).open()
		a, _ := req.Get("address")
		ao, _ := a.(*Object)
		if r, ok := state.values[addressOf(ao, "address")]; ok {
			return valueJSON(r)
		}
		return nil
	case "scan_values":
		return scanValues(req)
	case "read_list":
		return readList(req)
	case "get_entry":
		state := storage(req).open()
		id, _ := str(req, "entry_id")
		if e := state.entries[id]; e != nil {
			return entryJSON(e)
		}
		return nil
	case "get_usage":
		state := storage(req).open()
		id, _ := str(req, "usage_id")
		if u := state.usage[id]; u != nil {
			return usageJSON(u)
		}
		return nil
	case "stats":
		return storage(req).open().stats()
	case "snapshot":
		return storage(req).open().snapshot()
	case "close":
		storage(req).close()
		return nil
	}
	refuse("invalid_payload", "no op %q", op)
	return nil
}

func answer(line []byte) (out []byte) {
	parsed, err := parseJSON(line)
	req, ok := parsed.(*Object)
	id, _ := req.Get("id")
	if _, isID := isInt(id); err != nil || !ok || !isID { // true, "1", 1.0 and a missing id included
		return encode(O{{"id", nil}, {"error", O{{"code", "invalid_payload"}, {"message", "a request is one JSON object with an integer id"}, {"details", O{}}}}})
	}
	defer func() {
		if caught := recover(); caught != nil {
			code, message := "protocol_error", fmt.Sprintf("the backend panicked: %v\n%s", caught, debug.Stack())
			if r, ok := caught.(*Refusal); ok {
				code, message = r.Code, r.Message
			}
			out = encode(O{{"id", id}, {"error", O{{"code", code}, {"message", message}, {"details", O{}}}}})
		}
	}()
	return encode(O{{"id", id}, {"ok", dispatch(req)}})
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

func main() {
	readLines(func(line []byte) {
		if err := writeOut(append(answer(line), '\n')); err != nil {
			// stdout is the protocol's: nothing else may go there; say why on stderr and stop
			fmt.Fprintf(os.Stderr, "go-backend: cannot write a response to stdout: %v\n", err)
			os.Exit(2)
		}
	})
	if repo != nil {
		repo.close()
	}
	os.Exit(0)
}
