package server

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Limits on the fields of a check request. user, api_key, ip and the
// endpoint's path have none: whatever a caller sends there is decided (see
// ParseCheck), within the body's size limit.
const (
	MaxPlan = 64         // bytes of plan
	MaxCost = 1000000000 // largest cost, as rules.MaxLimit
)

// CheckRequest is the body of POST /ratelimit/check (docs/api.md):
//
//	{"user":"alice","api_key":"k_live_42","ip":"203.0.113.7",
//	 "plan":"free","endpoint":"GET /api/orders","cost":1}
//
// Empty strings and JSON null mean the field is absent.
type CheckRequest struct {
	User     string `json:"user,omitempty"`
	APIKey   string `json:"api_key,omitempty"`
	IP       string `json:"ip,omitempty"`
	Plan     string `json:"plan,omitempty"`
	Endpoint string `json:"endpoint,omitempty"` // "METHOD /path", or ""
	Cost     int64  `json:"cost"`               // 1..MaxCost; 1 when absent

	// Method and Path are the parts of Endpoint, as given: the limiter
	// drops the query and cleans the path (rules.CleanPath).
	Method string `json:"-"`
	Path   string `json:"-"`
}

// ParseCheck parses and validates a check request body. It is strict
// about the request's shape, which the integrating service decides: the
// body is one JSON object with no unknown or repeated keys and nothing
// after it; at least one of user, api_key and ip is set; plan is 1 to 64 of
// A-Z a-z 0-9 . _ - starting with a letter or digit; endpoint is "METHOD
// path", a method and a path separated by the first space; cost is a whole
// number from 1 to 1e9 written without fraction or exponent. The error is
// an *APIError (400, "invalid_request") whose message names the field.
//
// The values a caller of the integrating service controls are never
// refused: user, api_key and ip may be any string (one too long or odd is
// keyed by its digest, see package identity), the method any word (rules
// compare it without regard to case), and the path anything (the limiter
// drops its query and cleans it, see rules.CleanPath).
//
// The returned strings do not alias body.
func ParseCheck(body []byte) (CheckRequest, error) {
	var req CheckRequest
	var esc []byte
	err := parseCheck(bytes.Clone(body), &esc, &req)
	return req, err
}

// parseCheck parses b into dst. The strings of dst alias b and *esc (where
// escaped strings are decoded): they are valid as long as neither is reused.
func parseCheck(b []byte, esc *[]byte, dst *CheckRequest) error {
	var r rawCheck
	p := parser{b: b, esc: (*esc)[:0]}
	err := p.object(&r)
	*esc = p.esc
	if err != nil {
		return err
	}
	return r.validate(dst)
}

// The keys of a check request, in the order they are validated.
const (
	fUser = iota
	fAPIKey
	fIP
	fPlan
	fEndpoint
	fCost
	nFields
)

var fieldNames = [nFields]string{"user", "api_key", "ip", "plan", "endpoint", "cost"}

func fieldOf(key string) int {
	switch key {
	case "user":
		return fUser
	case "api_key":
		return fAPIKey
	case "ip":
		return fIP
	case "plan":
		return fPlan
	case "endpoint":
		return fEndpoint
	case "cost":
		return fCost
	}
	return -1
}

// kind is the JSON type of a value.
type kind uint8

const (
	kAbsent kind = iota
	kNull
	kString
	kNumber
	kBool
	kObject
	kArray
)

var kindNames = [...]string{kAbsent: "nothing", kNull: "null", kString: "a string", kNumber: "a number",
	kBool: "a boolean", kObject: "an object", kArray: "an array"}

// rawCheck is a check request as the tokenizer read it: for each key its
// JSON type and its text (the decoded string, or the number as written).
type rawCheck struct {
	kind [nFields]kind
	text [nFields]string
}

// validate checks r and fills dst.
func (r *rawCheck) validate(dst *CheckRequest) error {
	var s [nFields - 1]string
	for f := range fCost {
		switch r.kind[f] {
		case kAbsent, kNull:
		case kString:
			s[f] = r.text[f]
		default:
			return typeErr(f, r.kind[f])
		}
	}
	user, apiKey, ip, plan, endpoint := s[fUser], s[fAPIKey], s[fIP], s[fPlan], s[fEndpoint]
	if plan != "" && !validPlan(plan) {
		return invalid("plan: must be 1 to 64 of A-Z a-z 0-9 . _ - starting with a letter or digit, got " + quote(plan))
	}
	var method, path string
	if endpoint != "" {
		var err error
		if method, path, err = parseEndpoint(endpoint); err != nil {
			return err
		}
	}
	cost := int64(1)
	switch r.kind[fCost] {
	case kAbsent, kNull:
	case kNumber:
		var err error
		if cost, err = parseCost(r.text[fCost]); err != nil {
			return err
		}
	default:
		return typeErr(fCost, r.kind[fCost])
	}
	if user == "" && apiKey == "" && ip == "" {
		return invalid("want at least one of user, api_key, ip")
	}
	*dst = CheckRequest{User: user, APIKey: apiKey, IP: ip, Plan: plan, Endpoint: endpoint, Cost: cost, Method: method, Path: path}
	return nil
}

func typeErr(f int, k kind) *APIError {
	want := "a string"
	if f == fCost {
		want = "a whole number"
	}
	return invalid(fieldNames[f] + ": must be " + want + ", got " + kindNames[k])
}

func validPlan(p string) bool {
	if len(p) > MaxPlan || !isAlnum(p[0]) {
		return false
	}
	for i := 1; i < len(p); i++ {
		if c := p[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

const endpointForm = `want "METHOD /path", e.g. "GET /api/orders"`

// parseEndpoint splits "METHOD path" at its first space. The path is
// returned as given.
func parseEndpoint(s string) (method, path string, err error) {
	method, path, ok := strings.Cut(s, " ")
	if !ok || method == "" {
		return "", "", invalid("endpoint: " + endpointForm + ", got " + quote(s))
	}
	return method, path, nil
}

// parseCost parses a JSON number literal as a cost.
func parseCost(lit string) (int64, error) {
	if strings.ContainsAny(lit, ".eE") {
		return 0, invalid("cost: must be a whole number written without fraction or exponent, got " + lit)
	}
	if lit[0] == '-' {
		return 0, invalid("cost: must be at least 1, got " + lit)
	}
	if len(lit) > len("1000000000") {
		return 0, invalid("cost: must be at most " + strconv.Itoa(MaxCost) + ", got " + quote(lit))
	}
	var n int64
	for i := 0; i < len(lit); i++ {
		n = n*10 + int64(lit[i]-'0')
	}
	switch {
	case n < 1:
		return 0, invalid("cost: must be at least 1, got " + lit)
	case n > MaxCost:
		return 0, invalid("cost: must be at most " + strconv.Itoa(MaxCost) + ", got " + lit)
	}
	return n, nil
}

// quote quotes s for a message, eliding the middle of long values.
func quote(s string) string {
	const max = 80
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max / 2
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	end := len(s) - max/2
	for end < len(s) && !utf8.RuneStart(s[end]) {
		end++
	}
	return strconv.Quote(s[:cut]) + "…" + strconv.Quote(s[end:])
}

func invalid(msg string) *APIError {
	return &APIError{Status: 400, Code: CodeInvalidRequest, Message: msg}
}

// parser is a strict JSON tokenizer for one flat object of the keys of a
// check request (RFC 8259 syntax; values of unknown keys are never read, as
// an unknown key is an error). Strings without escapes alias b; escaped ones
// are decoded into esc.
type parser struct {
	b   []byte
	i   int
	esc []byte
}

func (p *parser) syntax(what string) *APIError {
	if p.i >= len(p.b) {
		return invalid("malformed JSON: unexpected end of input at offset " + strconv.Itoa(p.i) + ", " + what)
	}
	c := p.b[p.i]
	var got string
	if c >= 0x20 && c < 0x7f {
		got = "'" + string(rune(c)) + "'"
	} else {
		got = "byte 0x" + strconv.FormatUint(uint64(c), 16)
	}
	return invalid("malformed JSON at offset " + strconv.Itoa(p.i) + ": " + what + ", got " + got)
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

func (p *parser) object(r *rawCheck) error {
	p.ws()
	if p.i >= len(p.b) {
		return invalid(`request body is empty; want a JSON object such as {"user":"alice","endpoint":"GET /api/orders"}`)
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
		f := fieldOf(key)
		if f < 0 {
			return invalid("unknown field " + quote(key) + "; want user, api_key, ip, plan, endpoint, cost")
		}
		if r.kind[f] != kAbsent {
			return invalid("duplicate field " + quote(key))
		}
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.syntax("want ':' after key " + quote(key))
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
			return p.syntax("want ',' or '}' after the value of " + quote(key))
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

func (p *parser) value(r *rawCheck, f int) error {
	if p.i >= len(p.b) {
		return p.syntax("want a value")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		s, err := p.str()
		if err != nil {
			return err
		}
		r.kind[f], r.text[f] = kString, s
	case c == '-' || '0' <= c && c <= '9':
		s, err := p.number()
		if err != nil {
			return err
		}
		r.kind[f], r.text[f] = kNumber, s
	case c == 'n':
		if err := p.literal("null"); err != nil {
			return err
		}
		r.kind[f] = kNull
	case c == 't' || c == 'f':
		lit := "true"
		if c == 'f' {
			lit = "false"
		}
		if err := p.literal(lit); err != nil {
			return err
		}
		r.kind[f] = kBool
	case c == '{':
		return typeErr(f, kObject)
	case c == '[':
		return typeErr(f, kArray)
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
