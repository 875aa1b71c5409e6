package flatjson

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice/internal/quote"
)

// Parse reads b, one JSON object whose keys are among keys, into dst, with
// the hand-written tokenizer: RFC 8259 syntax; the values of unknown keys
// are never read, as an unknown key is an error. Strings without escapes
// alias b; escaped ones are decoded into *esc (reset first, grown as
// needed): dst's strings are valid as long as neither is reused. The error
// is ErrEmpty, an *Error or a *TypeError (see Decode for what differs).
func Parse(b []byte, keys *Keys, esc *[]byte, dst *Fields) error {
	*dst = Fields{}
	p := parser{b: b, esc: (*esc)[:0], keys: keys}
	err := p.object(dst)
	*esc = p.esc
	return err
}

// parser is the tokenizer's state.
type parser struct {
	b    []byte
	i    int
	esc  []byte
	keys *Keys
}

func (p *parser) syntax(what string) *Error {
	if p.i >= len(p.b) {
		return malformedEOF(p.i, what)
	}
	return &Error{Msg: "malformed JSON at offset " + strconv.Itoa(p.i) + ": " + what + ", got " + gotByte(p.b[p.i])}
}

func malformedEOF(off int, what string) *Error {
	return &Error{Msg: "malformed JSON: unexpected end of input at offset " + strconv.Itoa(off) + ", " + what}
}

// gotByte names c in a message.
func gotByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	return "byte 0x" + strconv.FormatUint(uint64(c), 16)
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) object(r *Fields) error {
	p.ws()
	if p.i >= len(p.b) {
		return ErrEmpty
	}
	if p.b[p.i] != '{' {
		return p.syntax("want a JSON object")
	}
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return p.end()
	}
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return p.syntax("want a string key")
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		f := p.keys.Index(key)
		if f < 0 {
			return p.keys.unknown(key)
		}
		if r.Kind[f] != Absent {
			return duplicate(key)
		}
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.syntax("want ':' after key " + quote.Short(key))
		}
		p.i++
		p.ws()
		if err := p.value(r, f); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) {
			return p.syntax("want ',' or '}'")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return p.end()
		default:
			return p.syntax("want ',' or '}' after the value of " + quote.Short(key))
		}
	}
}

// end checks that nothing but whitespace follows the object.
func (p *parser) end() error {
	p.ws()
	if p.i < len(p.b) {
		return p.syntax("want nothing after the JSON object")
	}
	return nil
}

func (p *parser) value(r *Fields, f int) error {
	if p.i >= len(p.b) {
		return p.syntax("want a value")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		s, err := p.str()
		if err != nil {
			return err
		}
		r.Kind[f], r.Text[f] = String, s
	case c == '-' || '0' <= c && c <= '9':
		s, err := p.number()
		if err != nil {
			return err
		}
		r.Kind[f], r.Text[f] = Number, s
	case c == 'n':
		if err := p.literal("null"); err != nil {
			return err
		}
		r.Kind[f] = Null
	case c == 't' || c == 'f':
		lit := "true"
		if c == 'f' {
			lit = "false"
		}
		if err := p.literal(lit); err != nil {
			return err
		}
		r.Kind[f] = Bool
	case c == '{':
		return &TypeError{Key: f, Kind: Object}
	case c == '[':
		return &TypeError{Key: f, Kind: Array}
	default:
		return p.syntax("want a value")
	}
	return nil
}

func (p *parser) literal(lit string) error {
	if !bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
		for j := 0; j < len(lit) && p.i < len(p.b) && p.b[p.i] == lit[j]; j++ {
			p.i++
		}
		return p.syntax("want " + lit)
	}
	p.i += len(lit)
	return nil
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() (string, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.i < len(p.b) && '1' <= p.b[p.i] && p.b[p.i] <= '9':
		p.digits()
	default:
		return "", p.syntax("want a digit in a number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.i >= len(p.b) || !isDigit(p.b[p.i]) {
			return "", p.syntax("want a digit after the decimal point")
		}
		p.digits()
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.i >= len(p.b) || !isDigit(p.b[p.i]) {
			return "", p.syntax("want a digit in the exponent")
		}
		p.digits()
	}
	return bytesString(p.b[start:p.i]), nil
}

func (p *parser) digits() {
	for p.i < len(p.b) && isDigit(p.b[p.i]) {
		p.i++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// str reads a JSON string; p.b[p.i] is its opening quote.
func (p *parser) str() (string, error) {
	p.i++
	start := p.i
	for i := start; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			p.i = i + 1
			return bytesString(p.b[start:i]), nil
		case c == '\\':
			p.i = i
			return p.strEscaped(start)
		case c < 0x20:
			p.i = i
			return "", p.syntax("control characters must be escaped in a string")
		}
	}
	p.i = len(p.b)
	return "", p.syntax("want '\"' to end the string")
}

// strEscaped decodes the string starting at start into p.esc; p.i is at its
// first backslash. Like encoding/json, an escaped lone surrogate becomes
// U+FFFD.
func (p *parser) strEscaped(start int) (string, error) {
	out := len(p.esc)
	p.esc = append(p.esc, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return bytesString(p.esc[out:]), nil
		case c < 0x20:
			return "", p.syntax("control characters must be escaped in a string")
		case c != '\\':
			p.esc = append(p.esc, c)
			p.i++
			continue
		}
		p.i++ // the backslash
		if p.i >= len(p.b) {
			break
		}
		switch e := p.b[p.i]; e {
		case '"', '\\', '/':
			p.esc = append(p.esc, e)
		case 'b':
			p.esc = append(p.esc, '\b')
		case 'f':
			p.esc = append(p.esc, '\f')
		case 'n':
			p.esc = append(p.esc, '\n')
		case 'r':
			p.esc = append(p.esc, '\r')
		case 't':
			p.esc = append(p.esc, '\t')
		case 'u':
			r, ok := hex4(p.b[p.i+1:])
			if !ok {
				return "", p.syntax(`want four hex digits after \u`)
			}
			p.i += 4
			if utf16.IsSurrogate(r) {
				if p.i+2 < len(p.b) && p.b[p.i+1] == '\\' && p.b[p.i+2] == 'u' {
					if r2, ok := hex4(p.b[p.i+3:]); ok {
						if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
							p.esc = utf8.AppendRune(p.esc, d)
							p.i += 7
							continue
						}
					}
				}
				r = unicode.ReplacementChar
			}
			p.esc = utf8.AppendRune(p.esc, r)
		default:
			return "", p.syntax("invalid escape in a string")
		}
		p.i++
	}
	return "", p.syntax("want '\"' to end the string")
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
