// JSON is read and written by hand, not with encoding/json: the checks send strings holding a
// lone UTF-16 surrogate as a `\ud800` escape, which encoding/json would turn into U+FFFD
// (making two different invalid ids one valid one, REPO-5).  Strings are kept as WTF-8 (a lone
// surrogate as its 3-byte generalized UTF-8 form), so utf8.ValidString tells a well-formed id,
// byte order is code-point order, and the writer escapes a surrogate back to `\udXXX`.

package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

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

func ParseJSON(b []byte) (v any, err error) {
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

// Encode is v as one line of JSON text.
func Encode(v any) []byte {
	var buf bytes.Buffer
	writeJSON(&buf, v)
	return buf.Bytes()
}
