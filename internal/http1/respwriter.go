package http1

import (
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"time"
)

// respWriter is the http.ResponseWriter of a request served by the loop.
// The status line and headers are written into the connection's buffer
// when the handler first writes past bufferBeforeChunking, flushes or
// returns; an answer without Content-Length that the handler finished
// before either gets one, a longer one is chunked — as net/http does.
type respWriter struct {
	c          *srvConn
	req        *http.Request
	h          http.Header
	status     int
	cl         int64 // the declared Content-Length, -1 when none
	written    int64
	buf        []byte // the body so far, until the headers are sent
	sent       bool   // status line and headers are in c.bw
	chunked    bool
	noBody     bool // the status carries no body
	closeAfter bool
	failed     bool // a write to the client failed
}

// bufferBeforeChunking is net/http's: a handler that writes at most this
// much without flushing gets a Content-Length.
const bufferBeforeChunking = 2048

func (w *respWriter) Header() http.Header {
	if w.h == nil {
		w.h = make(http.Header, 12)
	}
	return w.h
}

func (w *respWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic("http1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An interim answer goes out at once; the final one follows.
		bw := w.c.bw
		hb := newHeadBuf(bw)
		hb.statusLine(code)
		w.writeFields(&hb, false)
		hb.crlf()
		hb.done()
		if bw.Flush() != nil {
			w.failed = true
		}
		return
	}
	w.status = code
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if v := w.h["Content-Length"]; len(v) == 1 {
		if n, ok := parseDigits(v[0]); ok {
			w.cl = n
		} else if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
			w.cl = n
		}
	}
}

func (w *respWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.failed {
		return 0, errClientGone
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.sent {
		if w.cl < 0 && len(w.buf)+len(p) <= bufferBeforeChunking {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.sendHeader(false)
	}
	bw := w.c.bw
	var err error
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err = bw.WriteString("\r\n")
	} else {
		_, err = bw.Write(p)
	}
	if err != nil { // bufio.Writer keeps its first error
		w.failed = true
		return 0, err
	}
	return len(p), nil
}

var errClientGone = errors.New("http1: writing to the client failed")

// Flush sends what is written so far; an answer without Content-Length
// becomes chunked.
func (w *respWriter) Flush() { w.FlushError() }

// FlushError is Flush for http.ResponseController.
func (w *respWriter) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		w.sendHeader(false)
	}
	if err := w.c.bw.Flush(); err != nil {
		w.failed = true
		return err
	}
	return nil
}

// SetReadDeadline and SetWriteDeadline are for http.ResponseController.
func (w *respWriter) SetReadDeadline(t time.Time) error { return w.c.nc.SetReadDeadline(t) }
func (w *respWriter) SetWriteDeadline(t time.Time) error {
	w.c.wdeadline = true
	return w.c.nc.SetWriteDeadline(t)
}

// sendHeader writes the status line and the headers into the buffer,
// with the framing of the body: finished says the handler has returned,
// so a body of known size gets its Content-Length.
func (w *respWriter) sendHeader(finished bool) {
	w.sent = true
	h := w.Header()
	bw := w.c.bw
	hb := newHeadBuf(bw)
	hb.statusLine(w.status)
	if !w.noBody && len(w.buf) > 0 {
		if _, ok := h["Content-Type"]; !ok {
			hb.field("Content-Type", http.DetectContentType(w.buf))
		}
	}
	if _, ok := h["Date"]; !ok {
		var a [64]byte
		hb.str("Date: ")
		hb.bytes(time.Now().UTC().AppendFormat(a[:0], http.TimeFormat))
		hb.crlf()
	}
	delete(h, "Transfer-Encoding")
	switch {
	case w.noBody:
	case w.cl >= 0:
	case finished && !hasTrailers(h):
		hb.str("Content-Length: ")
		hb.int(int64(len(w.buf)))
		hb.crlf()
	default:
		w.chunked = true
		hb.str("Transfer-Encoding: chunked\r\n")
	}
	if w.req.Close || w.closeAfter {
		if _, ok := h["Connection"]; !ok {
			hb.str("Connection: close\r\n")
		}
	}
	w.writeFields(&hb, false)
	hb.crlf()
	hb.done()
	if len(w.buf) > 0 {
		buf := w.buf
		w.buf = nil
		if w.chunked {
			bw.WriteString(strconv.FormatInt(int64(len(buf)), 16))
			bw.WriteString("\r\n")
			bw.Write(buf)
			bw.WriteString("\r\n")
		} else {
			bw.Write(buf)
		}
	}
}

// hasTrailers reports whether h announces trailers or holds any set with
// http.TrailerPrefix.
func hasTrailers(h http.Header) bool {
	if len(h["Trailer"]) > 0 {
		return true
	}
	for k := range h {
		if len(k) > len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
			return true
		}
	}
	return false
}

// writeFields writes the headers (trailers: the trailer fields) of w.h,
// skipping invalid names and turning line breaks in values into spaces,
// as net/http does.
func (w *respWriter) writeFields(hb *headBuf, trailer bool) {
	for k, vv := range w.h {
		if !trailer && len(k) >= len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
			continue
		}
		if !validFieldName(k) {
			continue
		}
		for _, v := range vv {
			hb.answerField(k, v)
		}
	}
}

func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for ; len(k) >= 4; k = k[4:] { // four bytes a step
		if fieldBytes[k[0]]&fieldBytes[k[1]]&fieldBytes[k[2]]&fieldBytes[k[3]]&tokenByte == 0 {
			return false
		}
	}
	for i := 0; i < len(k); i++ {
		if !isTokenByte(k[i]) {
			return false
		}
	}
	return true
}

// finish completes the answer after the handler returned and sends it.
// It reports whether the connection may be reused.
func (w *respWriter) finish() bool {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if v, ok := w.h["Connection"]; ok && hasToken(v, "close") {
		w.closeAfter = true
	}
	if !w.sent {
		w.sendHeader(true)
	}
	bw := w.c.bw
	if w.chunked {
		hb := newHeadBuf(bw)
		hb.str("0\r\n")
		w.writeTrailers(&hb)
		hb.crlf()
		hb.done()
	}
	if err := bw.Flush(); err != nil || w.failed {
		return false
	}
	if w.cl >= 0 && w.written < w.cl && !w.noBody {
		return false // the answer is cut short: the client must not wait for the rest
	}
	return true
}

// writeTrailers writes the trailer fields: those the Trailer header
// announced, and those set with http.TrailerPrefix.
func (w *respWriter) writeTrailers(hb *headBuf) {
	for _, v := range w.h["Trailer"] {
		for v != "" {
			var f string
			f, v, _ = cutComma(v)
			k := textproto.CanonicalMIMEHeaderKey(textproto.TrimString(f))
			if k == "" || !validFieldName(k) {
				continue
			}
			for _, tv := range w.h[k] {
				hb.answerField(k, tv)
			}
		}
	}
	for k, vv := range w.h {
		if len(k) > len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
			name := k[len(http.TrailerPrefix):]
			if !validFieldName(name) {
				continue
			}
			for _, v := range vv {
				hb.answerField(name, v)
			}
		}
	}
}

func cutComma(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
