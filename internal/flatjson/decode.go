package flatjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// Decode is Parse done by encoding/json's Decoder, the library the
// tokenizer replaces: the same keys, kinds and texts, and the same errors,
// but for two differences. Its "malformed JSON" messages carry
// encoding/json's words; and a string's bytes that are not UTF-8 become
// U+FFFD, as encoding/json decodes them, where Parse keeps them as sent.
// dst's strings do not alias b.
func Decode(b []byte, keys *Keys, dst *Fields) error {
	*dst = Fields{}
	start := skipSpace(b, 0)
	if start == len(b) {
		return ErrEmpty
	}
	if b[start] != '{' {
		return &Error{Msg: "malformed JSON at offset " + strconv.Itoa(start) + ": want a JSON object, got " + gotByte(b[start])}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the '{'
		return malformed(b, dec, err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(b, dec, err)
		}
		key, ok := tok.(string)
		if !ok { // More is true before a '}' after a ','
			return &Error{Msg: "malformed JSON at offset " + strconv.FormatInt(dec.InputOffset(), 10) + ": want a string key"}
		}
		f := keys.Index(key)
		if f < 0 {
			return keys.unknown(key)
		}
		if dst.Kind[f] != Absent {
			return duplicate(key)
		}
		if tok, err = dec.Token(); err != nil {
			return malformed(b, dec, err)
		}
		switch v := tok.(type) {
		case nil:
			dst.Kind[f] = Null
		case string:
			dst.Kind[f], dst.Text[f] = String, v
		case json.Number:
			dst.Kind[f], dst.Text[f] = Number, string(v)
		case bool:
			dst.Kind[f] = Bool
		case json.Delim:
			k := Array
			if v == '{' {
				k = Object
			}
			return &TypeError{Key: f, Kind: k}
		}
	}
	if _, err := dec.Token(); err != nil { // the '}'
		return malformed(b, dec, err)
	}
	if end := skipSpace(b, int(dec.InputOffset())); end < len(b) {
		return &Error{Msg: "malformed JSON at offset " + strconv.Itoa(end) + ": want nothing after the JSON object, got " + gotByte(b[end])}
	}
	return nil
}

// malformed is the *Error of encoding/json's err.
func malformed(b []byte, dec *json.Decoder, err error) *Error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Msg: "malformed JSON: unexpected end of input at offset " + strconv.Itoa(len(b))}
	}
	off := dec.InputOffset()
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		off = se.Offset
	}
	return &Error{Msg: "malformed JSON at offset " + strconv.FormatInt(off, 10) + ": " + err.Error()}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
