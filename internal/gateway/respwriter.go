package gateway

import (
	"bufio"
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
		panic("gateway: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An interim answer goes out at once; the final one follows.
		bw := w.c.bw
		writeStatusLine(bw, code)
		w.writeFields(false)
		bw.WriteString("\r\n")
		if bw.Flush() != nil {
			w.failed = true
		}
		return
	}
	w.status = code
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if v := w.h["Content-Length"]; len(v) == 1 {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
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

var errClientGone = errors.New("gateway: writing to the client failed")

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
func (w *respWriter) SetReadDeadline(t time.Time) error  { return w.c.nc.SetReadDeadline(t) }
func (w *respWriter) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// sendHeader writes the status line and the headers into the buffer,
// with the framing of the body: finished says the handler has returned,
// so a body of known size gets its Content-Length.
func (w *respWriter) sendHeader(finished bool) {
	w.sent = true
	h := w.Header()
	bw := w.c.bw
	writeStatusLine(bw, w.status)
	trailers := len(h["Trailer"]) > 0
	if !trailers {
		for k := range h {
			if len(k) > len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
				trailers = true
				break
			}
		}
	}
	if _, ok := h["Content-Type"]; !ok && !w.noBody && len(w.buf) > 0 {
		bw.WriteString("Content-Type: ")
		bw.WriteString(http.DetectContentType(w.buf))
		bw.WriteString("\r\n")
	}
	if _, ok := h["Date"]; !ok {
		bw.WriteString("Date: ")
		bw.Write(time.Now().UTC().AppendFormat(bw.AvailableBuffer(), http.TimeFormat))
		bw.WriteString("\r\n")
	}
	delete(h, "Transfer-Encoding")
	switch {
	case w.noBody:
	case w.cl >= 0:
	case finished && !trailers:
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(len(w.buf)), 10))
		bw.WriteString("\r\n")
	default:
		w.chunked = true
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.req.Close || w.closeAfter {
		if _, ok := h["Connection"]; !ok {
			bw.WriteString("Connection: close\r\n")
		}
	}
	w.writeFields(false)
	bw.WriteString("\r\n")
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

// writeFields writes the headers (trailers: the trailer fields) of w.h,
// skipping invalid names and turning line breaks in values into spaces,
// as net/http does.
func (w *respWriter) writeFields(trailer bool) {
	bw := w.c.bw
	for k, vv := range w.h {
		if !trailer && len(k) >= len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
			continue
		}
		if !validFieldName(k) {
			continue
		}
		writeField(bw, k, vv)
	}
}

func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isTokenByte(k[i]) {
			return false
		}
	}
	return true
}

// writeField writes one header line name: v for each of vv.
func writeField(bw *bufio.Writer, name string, vv []string) {
	for _, v := range vv {
		bw.WriteString(name)
		bw.WriteString(": ")
		writeFieldValue(bw, v)
		bw.WriteString("\r\n")
	}
}

// writeFieldValue writes v trimmed, its line breaks turned into spaces,
// as net/http does. (Trimming first is the same: the blanks trimmed
// include CR and LF.)
func writeFieldValue(bw *bufio.Writer, v string) {
	v = textproto.TrimString(v)
	start := 0
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			bw.WriteString(v[start:i])
			bw.WriteByte(' ')
			start = i + 1
		}
	}
	bw.WriteString(v[start:])
}

// writeStatusLine writes the status line of code as net/http does: its
// reason, or "status code N" for a code without one.
func writeStatusLine(bw *bufio.Writer, code int) {
	bw.WriteString("HTTP/1.1 ")
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	}
	bw.WriteString("\r\n")
}

// finish completes the answer after the handler returned and sends it.
// It reports whether the connection may be reused.
func (w *respWriter) finish() bool {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if _, ok := w.h["Connection"]; ok && hasToken(w.h["Connection"], "close") {
		w.closeAfter = true
	}
	if !w.sent {
		w.sendHeader(true)
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		w.writeTrailers()
		bw.WriteString("\r\n")
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
func (w *respWriter) writeTrailers() {
	bw := w.c.bw
	for _, v := range w.h["Trailer"] {
		for v != "" {
			var f string
			f, v, _ = cutComma(v)
			k := textproto.CanonicalMIMEHeaderKey(textproto.TrimString(f))
			if k == "" || !validFieldName(k) {
				continue
			}
			for _, tv := range w.h[k] {
				bw.WriteString(k)
				bw.WriteString(": ")
				writeFieldValue(bw, tv)
				bw.WriteString("\r\n")
			}
		}
	}
	for k, vv := range w.h {
		if len(k) > len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
			name := k[len(http.TrailerPrefix):]
			if !validFieldName(name) {
				continue
			}
			writeField(bw, name, vv)
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
