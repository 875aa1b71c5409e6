package http1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// readPlainResponse reads the upstream's answer to a call of method from
// br into res when its status line and headers are already whole in br's
// buffer and of the plain form below, the form of almost every answer of
// an API; it reports whether it did. When it did not, nothing is
// consumed and http.ReadResponse reads the answer from the same place.
//
// The plain form:
//
//   - the status line is "HTTP/1.1 " and a code of three digits, 200 or
//     more but not 204 or 304, then nothing or a space and a reason;
//   - every header line is token ":" value CRLF, the value printable
//     ASCII or tab;
//   - exactly one Content-Length, of digits; no Transfer-Encoding,
//     Trailer or Pragma (net/http rewrites it); Connection, if present,
//     once and "close" or "keep-alive";
//   - the call's method is not HEAD.
//
// What it makes of such an answer is what http.ReadResponse makes of it
// (the fuzz test checks this): the same status, headers (names in
// canonical form, values trimmed), length and Close, and a body of
// Content-Length bytes that ends in io.ErrUnexpectedEOF when the
// connection ends first. The header values share one string of the whole
// header block rather than one allocation each. body holds the body's
// state; res.Body is body. The headers go into h, an empty map (nil: a
// new one), their values into vals when it is long enough.
func readPlainResponse(br *bufio.Reader, method string, res *http.Response, body *plainBody, h http.Header, vals []string) bool {
	if method == http.MethodHead {
		return false
	}
	buf, _ := br.Peek(br.Buffered())
	end := headerEnd(buf)
	if end < 0 {
		return false
	}
	// One string for the block: values and already-canonical names are
	// substrings of it.
	block := string(buf[:end+4])
	line, rest, ok := cutCRLFString(block)
	if !ok || len(line) < len("HTTP/1.1 200") || line[:len("HTTP/1.1 ")] != "HTTP/1.1 " {
		return false
	}
	status := line[len("HTTP/1.1 "):]
	if len(status) > 3 && status[3] != ' ' {
		return false
	}
	code := 0
	for i := 0; i < 3; i++ {
		d := status[i]
		if d < '0' || d > '9' {
			return false
		}
		code = code*10 + int(d-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return false
	}
	if n := strings.Count(rest, "\n") - 1; len(vals) < n { // header lines, at most
		vals = make([]string, n)
	}
	if h == nil {
		h = make(http.Header, 8)
	}
	length, closing := int64(-1), false
	for {
		var key, v string
		var end bool
		if key, v, rest, end, ok = plainField(rest); !ok {
			return false
		}
		if end {
			break
		}
		switch key {
		case "Content-Length":
			if length >= 0 || v == "" {
				return false
			}
			l, ok := parseDigits(v)
			if !ok {
				u, err := strconv.ParseUint(v, 10, 63)
				if err != nil {
					return false
				}
				l = int64(u)
			}
			length = l
		case "Transfer-Encoding", "Trailer", "Pragma":
			return false
		case "Connection":
			if h[key] != nil {
				return false
			}
			if closing, ok = plainConnection(v); !ok {
				return false
			}
		}
		vals = addValue(h, key, v, vals)
	}
	if length < 0 {
		return false
	}
	if closing {
		delete(h, "Connection") // as net/http does
	}
	br.Discard(len(block))
	*res = http.Response{
		Status:        status,
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          http.NoBody,
		ContentLength: length,
		Close:         closing,
	}
	if length > 0 {
		*body = plainBody{br: br, n: length}
		res.Body = body
	}
	return true
}

// parseDigits is strconv.ParseInt(s, 10, 64) for s of one to eighteen
// ASCII digits, which cannot overflow; not ok for any other s.
func parseDigits(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + int64(d)
	}
	return n, true
}

// headerEnd is bytes.Index(b, crlfcrlf), found a line at a time: the end
// of the first line followed by an empty one.
func headerEnd(b []byte) int {
	for i := 0; ; i++ {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j
		if i >= 3 && b[i-1] == '\r' && b[i-2] == '\n' && b[i-3] == '\r' {
			return i - 3
		}
	}
}

// plainBody is the body of a plain answer (readPlainResponse): the next
// n bytes of br. Like net/http's, it ends in io.ErrUnexpectedEOF when the
// connection ends before them. Close does nothing: the Client reads a
// body to its end before reusing the connection, and closes the
// connection otherwise.
type plainBody struct {
	br *bufio.Reader
	n  int64 // bytes left
}

func (b *plainBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	switch {
	case err == io.EOF && b.n > 0:
		err = io.ErrUnexpectedEOF
	case err == nil && b.n == 0:
		err = io.EOF
	}
	return n, err
}

func (b *plainBody) Close() error { return nil }
