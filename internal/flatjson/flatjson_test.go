package flatjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

var testKeys = NewKeys(nil, "user", "cost", "tags")

// readers are the two readers of the package, by name.
var readers = []struct {
	name string
	read func(b []byte, keys *Keys, dst *Fields) error
}{
	{"Parse", func(b []byte, keys *Keys, dst *Fields) error {
		var esc []byte
		return Parse(b, keys, &esc, dst)
	}},
	{"Decode", Decode},
}

func TestRead(t *testing.T) {
	tests := []struct {
		body  string
		kinds [3]Kind
		texts [3]string
	}{
		{`{}`, [3]Kind{}, [3]string{}},
		{` {"user":"a"} `, [3]Kind{String}, [3]string{"a"}},
		{"\t\r\n{ \"cost\" :\n-12.5e+3 , \"user\" : null }", [3]Kind{Null, Number}, [3]string{"", "-12.5e+3"}},
		{`{"tags":true,"cost":0}`, [3]Kind{Absent, Number, Bool}, [3]string{"", "0"}},
		{`{"tags":false}`, [3]Kind{Absent, Absent, Bool}, [3]string{}},
		{`{"user":"a\"b\\c\/d\u00e9\ud83d\ude00\b\f\n\r\t"}`, [3]Kind{String}, [3]string{"a\"b\\c/dé😀\b\f\n\r\t"}},
		{`{"\u0075ser":"x"}`, [3]Kind{String}, [3]string{"x"}},
		{`{"user":"\ud800x"}`, [3]Kind{String}, [3]string{"\ufffdx"}},
		{`{"user":"zoë 東京"}`, [3]Kind{String}, [3]string{"zoë 東京"}},
	}
	for _, r := range readers {
		for _, tt := range tests {
			var got Fields
			if err := r.read([]byte(tt.body), testKeys, &got); err != nil {
				t.Errorf("%s(%q): %v", r.name, tt.body, err)
				continue
			}
			want := Fields{}
			copy(want.Kind[:], tt.kinds[:])
			copy(want.Text[:], tt.texts[:])
			if got != want {
				t.Errorf("%s(%q) = %+v, want %+v", r.name, tt.body, got, want)
			}
		}
	}
}

func TestReadErrors(t *testing.T) {
	tests := []struct {
		body string
		want error // ErrEmpty, a *TypeError, or an *Error whose message contains the Parse one's
	}{
		{``, ErrEmpty},
		{" \n\t", ErrEmpty},
		{`[]`, &Error{"malformed JSON at offset 0: want a JSON object, got '['"}},
		{` "user"`, &Error{"malformed JSON at offset 1: want a JSON object, got '\"'"}},
		{`{"usr":1}`, &Error{`unknown field "usr"; want user, cost, tags`}},
		{`{"User":1}`, &Error{`unknown field "User"; want user, cost, tags`}},
		{`{"usr"x`, &Error{`unknown field "usr"; want user, cost, tags`}},
		{`{"user":1,"user":2}`, &Error{`duplicate field "user"`}},
		{`{"cost":null,"\u0063ost":2}`, &Error{`duplicate field "cost"`}},
		{`{"tags":["a"]}`, &TypeError{Key: 2, Kind: Array}},
		{`{"user":{"a":[}`, &TypeError{Key: 0, Kind: Object}},
		{`{"meta":{"a":1}}`, &Error{`unknown field "meta"; want user, cost, tags`}},
		{`{"user":"a"}x`, &Error{"malformed JSON at offset 12: want nothing after the JSON object, got 'x'"}},
		{`{"user":"a"} {}`, &Error{"malformed JSON at offset 13: want nothing after the JSON object, got '{'"}},
		{"{\"user\":\"a\"}\x00", &Error{"malformed JSON at offset 12: want nothing after the JSON object, got byte 0x0"}},
		{`{"user":"a",}`, &Error{"malformed JSON at offset 12: want a string key, got '}'"}},
		{`{"user" "a"}`, &Error{`malformed JSON at offset 8: want ':' after key "user", got '"'`}},
		{`{"user":"a" "cost":1}`, &Error{`malformed JSON at offset 12: want ',' or '}' after the value of "user", got '"'`}},
		{`{"user":"a"`, &Error{"malformed JSON: unexpected end of input at offset 11, want ',' or '}'"}},
		{`{"user":"a`, &Error{"malformed JSON: unexpected end of input at offset 10, want '\"' to end the string"}},
		{"{\"user\":\"a\tb\"}", &Error{"malformed JSON at offset 10: control characters must be escaped in a string, got byte 0x9"}},
		{`{"user":"a\qb"}`, &Error{"malformed JSON at offset 11: invalid escape in a string, got 'q'"}},
		{`{"user":"\u12g4"}`, &Error{`malformed JSON at offset 10: want four hex digits after \u, got 'u'`}},
		{`{'user':1}`, &Error{"malformed JSON at offset 1: want a string key, got '''"}},
		{`{"user":nul}`, &Error{"malformed JSON at offset 11: want null, got '}'"}},
		{`{"user":alice}`, &Error{"malformed JSON at offset 8: want a value, got 'a'"}},
		{`{"cost":-}`, &Error{"malformed JSON at offset 9: want a digit in a number, got '}'"}},
		{`{"cost":01}`, &Error{`malformed JSON at offset 9: want ',' or '}' after the value of "cost", got '1'`}},
		{`{"cost":1.}`, &Error{"malformed JSON at offset 10: want a digit after the decimal point, got '}'"}},
		{`{"cost":1e}`, &Error{"malformed JSON at offset 10: want a digit in the exponent, got '}'"}},
	}
	for _, r := range readers {
		for _, tt := range tests {
			var f Fields
			err := r.read([]byte(tt.body), testKeys, &f)
			if !sameError(err, tt.want, true) {
				t.Errorf("%s(%q) = %#v, want %#v", r.name, tt.body, err, tt.want)
			}
			// Parse's messages are exact; Decode's malformed ones carry
			// encoding/json's words.
			if e, ok := err.(*Error); ok && r.name == "Parse" && e.Msg != tt.want.(*Error).Msg {
				t.Errorf("Parse(%q) = %q, want %q", tt.body, e.Msg, tt.want.(*Error).Msg)
			}
		}
	}
}

// sameError reports whether the outcomes a and b of the two readers are
// the same: both nil, both ErrEmpty, equal *TypeErrors, or *Errors both
// malformed or with the same message — or, when not utf8, the same but
// for the key they name (Decode reads its bytes that are not UTF-8 as
// U+FFFD).
func sameError(a, b error, utf8 bool) bool {
	switch a := a.(type) {
	case *Error:
		b, ok := b.(*Error)
		return ok && a.Malformed() == b.Malformed() && (a.Malformed() || a.Msg == b.Msg || !utf8 && sameWords(a.Msg, b.Msg))
	case *TypeError:
		b, ok := b.(*TypeError)
		return ok && *a == *b
	}
	return a == b
}

// sameWords reports whether two messages about a key have the same words
// before the key.
func sameWords(a, b string) bool {
	a, _, _ = strings.Cut(a, `"`)
	b, _, _ = strings.Cut(b, `"`)
	return a == b
}

func TestParseAliasesAndReusesEsc(t *testing.T) {
	b := []byte(`{"user":"plain","cost":"e\u0073c"}`)
	esc := make([]byte, 0, 64)
	var f Fields
	if err := Parse(b, testKeys, &esc, &f); err != nil {
		t.Fatal(err)
	}
	if f.Text[0] != "plain" || f.Text[1] != "esc" || string(esc) != "esc" {
		t.Fatalf("Parse = %+v, esc %q; want plain, esc", f, esc)
	}
	b[9] = 'P' // the unescaped string is b's bytes
	if f.Text[0] != "Plain" {
		t.Errorf("after b changed, Text[0] = %q, want it to alias b", f.Text[0])
	}
}

func TestNewKeys(t *testing.T) {
	index := func(key string) int {
		switch key {
		case "a":
			return 0
		case "b":
			return 1
		case "c": // a key of a larger set
			return 2
		}
		return -1
	}
	for _, k := range []*Keys{NewKeys(nil, "a", "b"), NewKeys(index, "a", "b")} {
		if k.Index("b") != 1 || k.Index("c") != -1 || k.Index("") != -1 || k.Name(0) != "a" {
			t.Errorf("NewKeys(a, b): Index(b) %d, Index(c) %d, Name(0) %q", k.Index("b"), k.Index("c"), k.Name(0))
		}
	}
	for name, f := range map[string]func(){
		"more than MaxKeys":   func() { NewKeys(nil, strings.Split("a b c d e f g h i", " ")...) },
		"index disagrees":     func() { NewKeys(index, "b", "a") },
		"index misses a name": func() { NewKeys(index, "a", "b", "d") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewKeys, %s: no panic", name)
				}
			}()
			f()
		}()
	}
}

var fuzzSeeds = []string{
	`{"user":"alice","cost":1,"tags":null}`,
	`{"user":"k\u00e9\ud83d\ude00\n","cost":1e3}`,
	`{"user":"\ud800","cost":-1.5E+2}`,
	`{"user":"a","user":"b"}`,
	`{"user":"a","extra":1}`,
	` { "user" : "a" } `,
	`{"user":"a"}x`,
	`{"user":"a",}`,
	`{"user":[1,{"a":2}]}`,
	`{"tags":{}}`,
	`{"user":true,"cost":false}`,
	"{\"user\":\"a\xffb\"}",
	``,
	`{`,
	`{"`,
	`{"user":"a`,
	`{"cost":01}`,
	`[1]`,
}

// FuzzDecoders: Parse and Decode, on the same body, read the same fields
// or fail alike (sameError); and Parse accepts only valid JSON. On bytes
// that are not UTF-8 the strings differ: Decode reads them as U+FFFD.
func FuzzDecoders(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got, ref Fields
		var esc []byte
		err := Parse(body, testKeys, &esc, &got)
		refErr := Decode(body, testKeys, &ref)
		if !sameError(err, refErr, utf8.Valid(body)) {
			t.Fatalf("body %q: Parse error %#v, Decode error %#v", body, err, refErr)
		}
		if err != nil {
			if !errors.Is(err, ErrEmpty) && err.Error() == "" {
				t.Fatalf("body %q: an empty message", body)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("Parse accepted invalid JSON %q: %+v", body, got)
		}
		if got.Kind != ref.Kind || (utf8.Valid(body) && got.Text != ref.Text) {
			t.Fatalf("body %q: Parse %+v, Decode %+v", body, got, ref)
		}
	})
}
