package http1

import (
	"bufio"
	"net/http"
	"net/textproto"
	"strconv"

	"github.com/sluicehq/sluice/internal/ascii"
)

// headBuf builds a header block in the free space of a bufio.Writer and
// hands it to the writer with one Write, rather than four writes a line.
// Lines that do not fit in the free space flush the writer first, as
// writing them piece by piece would; a line longer than the writer's whole
// buffer is written piece by piece. The bytes written are the same either
// way. done must be called before the writer is used directly again.
type headBuf struct {
	bw *bufio.Writer
	b  []byte // the free space of bw, holding the lines built so far
}

func newHeadBuf(bw *bufio.Writer) headBuf { return headBuf{bw: bw, b: bw.AvailableBuffer()} }

// done hands the lines built to bw.
func (h *headBuf) done() {
	if len(h.b) > 0 {
		h.bw.Write(h.b)
	}
	h.b = h.bw.AvailableBuffer()
}

// room reports whether n more bytes fit in b, handing what b holds to bw
// and flushing bw when they do not fit otherwise. When it reports false,
// b is empty and bw is to be written to directly.
func (h *headBuf) room(n int) bool { return cap(h.b)-len(h.b) >= n || h.grow(n) } // inlined

// grow is room when b has no room for n bytes.
func (h *headBuf) grow(n int) bool {
	h.done()
	if h.bw.Available() < n {
		h.bw.Flush() // a failure stays in bw: every later write fails
		h.b = h.bw.AvailableBuffer()
	}
	return cap(h.b) >= n
}

// str appends s.
func (h *headBuf) str(s string) {
	if h.room(len(s)) {
		h.b = append(h.b, s...)
		return
	}
	h.strDirect(s)
}

// strDirect writes s to bw directly: it does not fit in bw's buffer.
func (h *headBuf) strDirect(s string) {
	h.bw.WriteString(s)
	h.b = h.bw.AvailableBuffer()
}

// bytes appends p.
func (h *headBuf) bytes(p []byte) {
	if h.room(len(p)) {
		h.b = append(h.b, p...)
		return
	}
	h.bw.Write(p)
	h.b = h.bw.AvailableBuffer()
}

// int appends n in decimal.
func (h *headBuf) int(n int64) {
	var a [20]byte
	h.bytes(strconv.AppendInt(a[:0], n, 10))
}

// field appends the line "k: v" as it is.
func (h *headBuf) field(k, v string) {
	if h.room(len(k) + len(v) + 4) {
		b := append(h.b, k...)
		b = append(b, ':', ' ') // bytes, not a string: no memmove call
		b = append(b, v...)
		h.b = append(b, '\r', '\n')
		return
	}
	h.bw.WriteString(k)
	h.bw.WriteString(": ")
	h.bw.WriteString(v)
	h.bw.WriteString("\r\n")
	h.b = h.bw.AvailableBuffer()
}

// answerField appends the line "k: v" of an answer, v trimmed and its
// line breaks turned into spaces, as net/http writes it. (Trimming first
// is the same: the blanks trimmed include CR and LF.)
func (h *headBuf) answerField(k, v string) {
	v = textproto.TrimString(v)
	if !h.room(len(k) + len(v) + 4) {
		h.bw.WriteString(k)
		h.bw.WriteString(": ")
		for i := 0; i < len(v); i++ {
			if c := v[i]; c == '\r' || c == '\n' {
				h.bw.WriteByte(' ')
			} else {
				h.bw.WriteByte(c)
			}
		}
		h.bw.WriteString("\r\n")
		h.b = h.bw.AvailableBuffer()
		return
	}
	b := append(h.b, k...)
	b = append(b, ':', ' ')
	start := len(b)
	b = append(b, v...)
	if !ascii.Printable(v) { // else no CR or LF
		for i := start; i < len(b); i++ {
			if c := b[i]; c == '\r' || c == '\n' {
				b[i] = ' '
			}
		}
	}
	h.b = append(b, '\r', '\n')
}

// crlf appends CRLF.
func (h *headBuf) crlf() {
	if h.room(2) {
		h.b = append(h.b, '\r', '\n')
		return
	}
	h.strDirect("\r\n")
}

// statusLine appends the status line of code as net/http writes it: its
// reason, or "status code N" for a code without one.
func (h *headBuf) statusLine(code int) {
	if code == http.StatusOK {
		h.str("HTTP/1.1 200 OK\r\n")
		return
	}
	h.str("HTTP/1.1 ")
	h.int(int64(code))
	if text := http.StatusText(code); text != "" {
		h.str(" ")
		h.str(text)
	} else {
		h.str(" status code ")
		h.int(int64(code))
	}
	h.str("\r\n")
}
