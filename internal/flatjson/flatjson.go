// Package flatjson reads one flat JSON object of known keys — the body of
// a check or reserve request (docs/api.md) — strictly: no unknown or
// repeated key, nothing after the object, and a nested object or array
// refused as the value of the key it is given for.
//
// It has two readers of the same contract: Parse, a hand-written
// tokenizer that allocates nothing (docs/benchmarks.md, "Parsing the
// body"), and Decode, the same reading done by encoding/json's Decoder, to
// fall back to (`sluice serve --json-decoder std`). FuzzDecoders holds
// them to the same outcome.
package flatjson

import (
	"errors"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/quote"
)

// MaxKeys is the most keys an object may have.
const MaxKeys = 8

// Kind is the JSON type of a value.
type Kind uint8

// The kinds of a value; Absent is a key the object does not have.
const (
	Absent Kind = iota
	Null
	String
	Number
	Bool
	Object
	Array
)

var kindNames = [...]string{Absent: "nothing", Null: "null", String: "a string", Number: "a number",
	Bool: "a boolean", Object: "an object", Array: "an array"}

// String is the kind as a message names it: "a string", "an object".
func (k Kind) String() string { return kindNames[k] }

// Keys are the keys an object may have, in order: a key's index in Fields
// is its place here.
type Keys struct {
	names []string
	list  string               // the names, comma-separated, for an unknown key's message
	index func(key string) int // see NewKeys
}

// NewKeys returns the keys names, at most MaxKeys. index, when not nil,
// finds a key's index among names (-1 or len(names) or more for another
// key) faster than a search of names does — a switch compares a short key
// in a few instructions, where == calls the runtime; NewKeys panics if it
// disagrees with names.
func NewKeys(index func(key string) int, names ...string) *Keys {
	if len(names) > MaxKeys {
		panic("flatjson: more than MaxKeys keys")
	}
	k := &Keys{names: names, list: strings.Join(names, ", "), index: index}
	if index == nil {
		k.index = func(key string) int {
			for i, n := range names {
				if n == key {
					return i
				}
			}
			return -1
		}
	}
	for i, n := range names {
		if k.Index(n) != i {
			panic("flatjson: NewKeys: index(" + strconv.Quote(n) + ") is not " + strconv.Itoa(i))
		}
	}
	return k
}

// Index is the index of key, or -1 when it is not one of k.
func (k *Keys) Index(key string) int {
	if i := k.index(key); uint(i) < uint(len(k.names)) {
		return i
	}
	return -1
}

// Name is the key of index i.
func (k *Keys) Name(i int) string { return k.names[i] }

func (k *Keys) unknown(key string) *Error {
	return &Error{Msg: "unknown field " + quote.Short(key) + "; want " + k.list}
}

func duplicate(key string) *Error { return &Error{Msg: "duplicate field " + quote.Short(key)} }

// Fields is an object as read: for each key (by its index in Keys) its
// JSON type and its text — the decoded string, or the number as written.
type Fields struct {
	Kind [MaxKeys]Kind
	Text [MaxKeys]string
}

// ErrEmpty is the error of an input that is empty or only whitespace.
var ErrEmpty = errors.New("flatjson: empty input")

// Error is an input that is not JSON ("malformed JSON ..."), not an
// object, or an object with an unknown or repeated key. Msg says which,
// naming the key, for the caller to show.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// Malformed reports whether e is about the JSON syntax, not the keys. The
// two readers word these differently (Decode passes on encoding/json's
// words); their other messages are the same, but for a key's bytes that
// are not UTF-8 (Decode names them U+FFFD).
func (e *Error) Malformed() bool { return strings.HasPrefix(e.Msg, "malformed JSON") }

// TypeError is a key whose value is an object or an array, which is
// never read; reading stops there.
type TypeError struct {
	Key  int  // index in Keys
	Kind Kind // Object or Array
}

func (e *TypeError) Error() string {
	return "flatjson: the value of key " + strconv.Itoa(e.Key) + " is " + e.Kind.String()
}
