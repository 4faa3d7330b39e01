package protocol

import (
	"sort"
	"strconv"
)

// One Session's state: what its reads answer, rebuilt on every open from the Session's records
// (one per committed transaction, in commit order).

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

// State is one Session's logical state and its next seq (one seq space per Session, SEQ-1).
type State struct {
	nextSeq int64
	values  map[slot]valueRec
	lists   map[slot][]element
	entries map[string]*entryRec
	usage   map[string]*usageRec
}

// NewState is an empty Session's state: no records, the next seq 1.
func NewState() *State {
	return &State{1, map[slot]valueRec{}, map[slot][]element{}, map[string]*entryRec{}, map[string]*usageRec{}}
}

// Commit checks a commit in the contract's order (TX-5): the shape and the one scope (TX-1..3),
// then whether the handle is usable (a backend's own check: `unusable` is the reason it is not,
// JSONL-12, CRASH-FS-10; an empty commit is refused too), then ids and references (WRITE-5,
// WRITE-6); an empty commit then answers [] and consumes no seq (SEQ-4).  Otherwise keep is
// given the commit's record, {"s": first seq, "t": timestamp, "w": [writes in their wire
// form]}, to make it durable; keep answers a failure itself (Refuse or IOError), so the state
// changes only once keep has returned, and the commit is acknowledged with one seq per write.
func (s *State) Commit(raw any, now int64, unusable string, keep func(record []byte)) []any {
	writes := checkShape(raw)
	if unusable != "" {
		Refuse("unusable", "refusing writes until the Session is opened again: %s", unusable)
	}
	checkReferences(writes, s)
	if len(writes) == 0 {
		return []any{}
	}
	first := s.nextSeq
	items := make([]any, len(writes))
	for i, w := range writes {
		items[i] = w.raw
	}
	keep(Encode(O{{"s", first}, {"t", now}, {"w", items}}))
	s.apply(writes, first, now)
	done := make([]any, len(writes))
	for i := range writes {
		done[i] = O{{"seq", first + int64(i)}, {"timestamp", now}}
	}
	return done
}

// ApplyRecord applies one record that Commit gave to keep; false when data is not one (the
// caller answers `corrupt`, naming where).
func (s *State) ApplyRecord(data []byte) (ok bool) {
	parsed, err := ParseJSON(data)
	record, _ := parsed.(*Object)
	sv, okS := record.Get("s")
	tv, okT := record.Get("t")
	wv, _ := record.Get("w")
	items, okW := wv.([]any)
	first, ok1 := isInt(sv)
	now, ok2 := isInt(tv)
	if err != nil || !okS || !okT || !okW || !ok1 || !ok2 {
		return false
	}
	defer func() {
		if caught := recover(); caught != nil {
			if _, refused := caught.(*Refusal); !refused {
				panic(caught)
			}
			ok = false // a write that is not one: the record is damaged
		}
	}()
	writes := make([]write, len(items))
	for i, item := range items {
		o, _ := item.(*Object)
		writes[i] = decodeWrite(o, i)
	}
	s.apply(writes, first, now)
	return true
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
		parsed, _ := ParseJSON([]byte(row.usage))
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
