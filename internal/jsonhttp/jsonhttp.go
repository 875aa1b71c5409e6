// Package jsonhttp writes what sluice's HTTP APIs answer in JSON: the
// Content-Type they carry and the error body they share,
//
//	{"error":"<code>","message":"<message>"}
//
// (docs/api.md). The decision API, the admin API, the gateway, the
// middleware and the bearer-token checks all write their errors here.
package jsonhttp

import (
	"net/http"
	"strconv"
	"unicode/utf8"
)

// contentType is shared by every answer: setting it allocates nothing.
// Never modified.
var contentType = []string{"application/json"}

// SetContentType sets Content-Type: application/json on h, without
// allocating.
func SetContentType(h http.Header) { h["Content-Type"] = contentType }

// APIError is an error with the answer it calls for: status Status and
// the body {"error": Code, "message": Message}. The decision and admin
// APIs' handlers return it, and each API renders it in one place (Write).
type APIError struct {
	Status  int    // HTTP status
	Code    string // the API's code for it, e.g. "invalid_request"
	Message string // what is wrong, naming the field when there is one
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

// Write answers e with WriteError.
func (e *APIError) Write(w http.ResponseWriter) { WriteError(w, e.Status, e.Code, e.Message) }

// WriteError answers status with Content-Type: application/json, a
// Content-Length, and the body {"error":"<code>","message":"<message>"}
// and a newline. Any code and message are escaped as JSON needs.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	b := make([]byte, 0, 32+len(code)+len(message))
	b = append(b, `{"error":`...)
	b = AppendString(b, code)
	b = append(b, `,"message":`...)
	b = AppendString(b, message)
	b = append(b, "}\n"...)
	h := w.Header()
	SetContentType(h)
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	w.Write(b) //nolint:errcheck // the client is gone; nothing to do
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD;
// U+2028 and U+2029 are escaped so the output is also valid JavaScript.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			case '\u2028':
				b = append(b, `\u2028`...)
			default:
				b = append(b, `\u2029`...)
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
