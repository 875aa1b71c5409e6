package http1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// responseCases are answers of an upstream, plain ones and ones
// readPlainResponse leaves to http.ReadResponse.
var responseCases = []struct {
	name, raw string
	plain     bool // readPlainResponse takes it for a GET
}{
	{"plain", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", true},
	{"no reason", "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", true},
	{"odd names and spaces", "HTTP/1.1 404 Not Found\r\ncontent-type:  text/plain \t\r\nX-my_header: a\r\nx-MY_header: b\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 3\r\n\r\nabc", true},
	{"connection close", "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno", true},
	{"connection keep-alive", "HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok", true},
	{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", true},
	{"empty value", "HTTP/1.1 200 OK\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n", true},
	{"many headers, repeats", "HTTP/1.1 200 OK\r\nX-H0: 0\r\nX-H1: 1\r\nX-H2: 2\r\nX-H3: 3\r\nX-H4: 4\r\nX-H5: 5\r\nX-H6: 6\r\nX-H7: 7\r\nX-H8: 8\r\nX-H9: 9\r\nX-H10: 10\r\nX-H11: 11\r\nX-H12: 12\r\nX-H13: 13\r\nX-H14: 14\r\nX-H15: 15\r\nX-H16: 16\r\nX-H17: 17\r\nX-H18: 18\r\nX-H19: 19\r\nX-H18: again\r\nX-H1: again\r\nx-h19: and again\r\nContent-Length: 0\r\n\r\n", true},
	{"many headers, two lengths", "HTTP/1.1 200 OK\r\nX-H0: 0\r\nX-H1: 1\r\nX-H2: 2\r\nX-H3: 3\r\nX-H4: 4\r\nX-H5: 5\r\nX-H6: 6\r\nX-H7: 7\r\nX-H8: 8\r\nX-H9: 9\r\nX-H10: 10\r\nX-H11: 11\r\nX-H12: 12\r\nX-H13: 13\r\nX-H14: 14\r\nX-H15: 15\r\nX-H16: 16\r\nX-H17: 17\r\nX-H18: 18\r\nX-H19: 19\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", false},
	{"many headers, Connection twice", "HTTP/1.1 200 OK\r\nX-H0: 0\r\nX-H1: 1\r\nX-H2: 2\r\nX-H3: 3\r\nX-H4: 4\r\nX-H5: 5\r\nX-H6: 6\r\nX-H7: 7\r\nX-H8: 8\r\nX-H9: 9\r\nX-H10: 10\r\nX-H11: 11\r\nX-H12: 12\r\nX-H13: 13\r\nX-H14: 14\r\nX-H15: 15\r\nX-H16: 16\r\nX-H17: 17\r\nX-H18: 18\r\nX-H19: 19\r\nConnection: close\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false},
	{"no length", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", false},
	{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
	{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", false},
	{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", false},
	{"no content", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", false},
	{"not modified", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", false},
	{"continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", false},
	{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok", false},
	{"pragma", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nok", false},
	{"trailer", "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nContent-Length: 2\r\n\r\nok", false},
	{"connection upgrade", "HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 2\r\n\r\nok", false},
	{"utf-8 value", "HTTP/1.1 200 OK\r\nX-Name: caf\xc3\xa9\r\nContent-Length: 2\r\n\r\nok", false},
	{"space in name", "HTTP/1.1 200 OK\r\nX Name: a\r\nContent-Length: 2\r\n\r\nok", false},
	{"code of two digits", "HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"headers cut off", "HTTP/1.1 200 OK\r\nContent-Len", false},
}

// readBoth reads raw as an answer to a call of method with
// readPlainResponse (ok false when it does not take it) and with
// http.ReadResponse.
func readBoth(raw []byte, method string) (ok bool, got, want *http.Response, gotBody, wantBody []byte, gotErr, wantErr error) {
	br := bufio.NewReaderSize(bytes.NewReader(raw), maxRequestHeader)
	br.Peek(1)
	got = new(http.Response)
	if !readPlainResponse(br, method, got, new(plainBody), nil, nil) {
		return false, nil, nil, nil, nil, nil, nil
	}
	gotBody, gotErr = io.ReadAll(got.Body)
	want, wantErr = http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), &http.Request{Method: method})
	if wantErr != nil {
		return true, got, nil, gotBody, nil, gotErr, wantErr
	}
	wantBody, wantErr = io.ReadAll(want.Body)
	return true, got, want, gotBody, wantBody, gotErr, wantErr
}

func sameResponse(got, want *http.Response, gotBody, wantBody []byte, gotErr, wantErr error) error {
	if got.StatusCode != want.StatusCode || got.Status != want.Status || got.Proto != want.Proto ||
		got.ContentLength != want.ContentLength || got.Close != want.Close || len(want.TransferEncoding) != 0 ||
		len(want.Trailer) != 0 || !reflect.DeepEqual(got.Header, want.Header) ||
		!bytes.Equal(gotBody, wantBody) || !errors.Is(gotErr, wantErr) {
		return fmt.Errorf("\nplain    %q %s cl=%d close=%v %v body=%q err=%v\nnet/http %q %s cl=%d close=%v %v body=%q err=%v",
			got.Status, got.Proto, got.ContentLength, got.Close, got.Header, gotBody, gotErr,
			want.Status, want.Proto, want.ContentLength, want.Close, want.Header, wantBody, wantErr)
	}
	return nil
}

func TestReadPlainResponse(t *testing.T) {
	for _, tt := range responseCases {
		t.Run(tt.name, func(t *testing.T) {
			ok, got, want, gotBody, wantBody, gotErr, wantErr := readBoth([]byte(tt.raw), http.MethodGet)
			if ok != tt.plain {
				t.Fatalf("readPlainResponse took it: %v, want %v", ok, tt.plain)
			}
			if !ok {
				return
			}
			if want == nil {
				t.Fatalf("readPlainResponse took it, http.ReadResponse refuses it: %v", wantErr)
			}
			if err := sameResponse(got, want, gotBody, wantBody, gotErr, wantErr); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("HEAD", func(t *testing.T) {
		if ok, _, _, _, _, _, _ := readBoth([]byte(responseCases[0].raw), http.MethodHead); ok {
			t.Fatal("readPlainResponse took the answer to a HEAD call, whose Content-Length is not its body's")
		}
	})
	// Headers not yet whole in the buffer are left to http.ReadResponse,
	// with nothing consumed.
	t.Run("partial", func(t *testing.T) {
		raw := responseCases[0].raw
		br := bufio.NewReader(io.MultiReader(strings.NewReader(raw[:20]), strings.NewReader(raw[20:])))
		br.Peek(1)
		if readPlainResponse(br, http.MethodGet, new(http.Response), new(plainBody), nil, nil) {
			t.Fatal("readPlainResponse took an answer whose headers are not all in the buffer")
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != "hello" {
			t.Fatalf("body %q after the fallback, want %q", b, "hello")
		}
	})
}

// FuzzReadPlainResponse: whatever answer readPlainResponse takes,
// http.ReadResponse takes too and makes the same answer of it, body and
// its end included.
func FuzzReadPlainResponse(f *testing.F) {
	for _, tt := range responseCases {
		f.Add([]byte(tt.raw), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		ok, got, want, gotBody, wantBody, gotErr, wantErr := readBoth(raw, method)
		if !ok {
			return
		}
		if want == nil {
			t.Fatalf("readPlainResponse took %q, http.ReadResponse refuses it: %v", raw, wantErr)
		}
		if err := sameResponse(got, want, gotBody, wantBody, gotErr, wantErr); err != nil {
			t.Fatalf("%q:%v", raw, err)
		}
	})
}

// TestHeaderEnd: headerEnd finds what bytes.Index finds.
func TestHeaderEnd(t *testing.T) {
	for _, s := range []string{
		"", "\r\n\r\n", "\n\r\n\r\n", "\r\n\r\r\n\r\n", "a\r\n\r", "a\r\nb\r\n\r\nc\r\n\r\n",
		"\n\n\r\n", "\r\r\n\r\n", "HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody\r\n\r\n", "x\n\r\n",
	} {
		if got, want := headerEnd([]byte(s)), bytes.Index([]byte(s), crlfcrlf); got != want {
			t.Errorf("headerEnd(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestParseDigits: parseDigits takes what strconv.ParseInt takes, as the
// same number, for up to eighteen digits, and nothing else.
func TestParseDigits(t *testing.T) {
	for _, s := range []string{"0", "7", "55", "007", "123456789012345678", "999999999999999999", "1234567890123456789",
		"", "+5", "-5", "5 ", " 5", "1_000", "0x10", "5a", "９"} {
		got, ok := parseDigits(s)
		want, err := strconv.ParseInt(s, 10, 64)
		digits := len(s) > 0 && len(s) <= 18 && strings.Trim(s, "0123456789") == ""
		if ok != digits || ok && (err != nil || got != want) {
			t.Errorf("parseDigits(%q) = %d, %v; strconv: %d, %v", s, got, ok, want, err)
		}
	}
}
