package http1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzParsePlainServer: whatever request block the loop takes, a running
// net/http server takes too (its own checks included: one valid Host,
// valid names and values, the request line) and its handler sees the same
// request: method, target, URL, Host, headers, Close.
func FuzzParsePlainServer(f *testing.F) {
	for _, raw := range requestCases {
		if i := strings.Index(raw, "\r\n\r\n"); i >= 0 {
			f.Add([]byte(raw[:i+4]))
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, describeRequest(r))
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	f.Fuzz(func(t *testing.T, block []byte) {
		if !bytes.HasSuffix(block, []byte("\r\n\r\n")) || len(block) > maxRequestHeader {
			return
		}
		got := new(http.Request)
		if !parsePlain(block, got, nil, new([]string)) {
			return
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(block); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: reading net/http's answer: %v", block, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("the loop took %q, a net/http server answers %d %q", block, res.StatusCode, b)
		}
		if want := string(b); describeRequest(got) != want {
			t.Fatalf("%q:\nloop     %s\nnet/http %s", block, describeRequest(got), want)
		}
	})
}

// describeRequest is what a handler sees of r, one line.
func describeRequest(r *http.Request) string {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.Header {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q %#v %s host=%q cl=%d close=%v", r.Method, r.RequestURI, *r.URL, r.Proto, r.Host, r.ContentLength, r.Close)
	for _, k := range keys {
		fmt.Fprintf(&b, " %q=%q", k, r.Header[k])
	}
	return b.String()
}

// FuzzWriteRequest: the request the Client writes upstream for a request
// net/http's parser read is the one http.Request.Write writes for it once
// the hop-by-hop and forwarding headers are dropped and the target is
// joined to the upstream's prefix: read back with http.ReadRequest, the
// same method, target, Host, headers, framing and body, and nothing after
// it (no second request in its bytes).
func FuzzWriteRequest(f *testing.F) {
	f.Add("GET", "/a/b?x=1", "X-A", "1", "Connection", "X-A", []byte(nil), false)
	f.Add("POST", "/p", "Content-Type", "text/plain", "Te", "trailers, gzip", []byte("hello"), false)
	f.Add("PUT", "/caf%C3%A9?", "X-B", "\tv ", "Keep-Alive", "5", []byte("streamed"), true)
	f.Add("DELETE", "/%2F/x", "Transfer-Encoding", "chunked", "X-Forwarded-For", "1.2.3.4", []byte("x"), true)
	f.Add("OPTIONS", "/", "Upgrade", "h2c", "Forwarded", "for=x", []byte(nil), false)
	up, _ := url.Parse("http://up.example:8080/v1")
	cl := NewClient(ClientConfig{Upstream: up})
	f.Fuzz(func(t *testing.T, method, target, k1, v1, k2, v2 string, body []byte, chunked bool) {
		var raw strings.Builder
		fmt.Fprintf(&raw, "%s %s HTTP/1.1\r\nHost: client.example\r\n%s: %s\r\n%s: %s\r\n", method, target, k1, v1, k2, v2)
		switch {
		case chunked:
			fmt.Fprintf(&raw, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		case len(body) > 0:
			fmt.Fprintf(&raw, "Content-Length: %d\r\n\r\n%s", len(body), body)
		default:
			raw.WriteString("\r\n")
		}
		in, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw.String())))
		if err != nil || in.URL.Opaque != "" || !strings.HasPrefix(in.RequestURI, "/") || len(body) == 0 && chunked {
			return
		}
		if in.Method == http.MethodHead || in.Method == http.MethodConnect || len(in.Header["Expect"]) > 0 || len(in.Header["Upgrade"]) > 0 {
			return // not the Client's (Takes)
		}
		inBody, _ := io.ReadAll(in.Body)
		if !bytes.Equal(inBody, body) {
			return
		}

		// The Client's bytes.
		var out bytes.Buffer
		uc := &upConn{bw: bufio.NewWriterSize(&out, 4<<10)}
		in.Body = io.NopCloser(bytes.NewReader(inBody))
		if len(inBody) == 0 {
			in.Body = http.NoBody
		}
		if err := cl.writeRequest(uc, in, &Forwarded{}); err != nil {
			t.Fatalf("writeRequest: %v", err)
		}

		// http.Request.Write's, for the request as ReverseProxy sends it.
		ref := &http.Request{Method: in.Method, Host: up.Host, Header: http.Header{}, ContentLength: in.ContentLength,
			URL: &url.URL{Scheme: "http", Host: up.Host, Path: up.Path + in.URL.Path, RawPath: rawJoin(up, in.URL), RawQuery: in.URL.RawQuery, ForceQuery: in.URL.ForceQuery}}
		dropped := map[string]bool{"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
			"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
			"Host": true, "Content-Length": true, "X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true, "Forwarded": true}
		for _, v := range in.Header["Connection"] {
			for _, name := range strings.Split(v, ",") {
				dropped[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
			}
		}
		for k, vv := range in.Header {
			if !dropped[k] {
				ref.Header[k] = vv
			}
		}
		if hasToken(in.Header["Te"], "trailers") {
			ref.Header["Te"] = []string{"trailers"}
		}
		if _, ok := ref.Header["User-Agent"]; !ok {
			ref.Header["User-Agent"] = []string{""} // none, as the Client sends
		}
		if len(inBody) > 0 {
			ref.Body = io.NopCloser(bytes.NewReader(inBody))
		}
		var want bytes.Buffer
		if err := ref.Write(&want); err != nil {
			return // http.Request.Write refuses it
		}

		got, gotBody, gotRest, gerr := readBack(out.Bytes())
		exp, expBody, _, werr := readBack(want.Bytes())
		if werr != nil {
			return
		}
		if gerr != nil {
			t.Fatalf("the Client wrote %q, which net/http cannot read: %v\n(http.Request.Write: %q)", out.Bytes(), gerr, want.Bytes())
		}
		if len(gotRest) > 0 {
			t.Fatalf("the Client wrote %q: %q after the request", out.Bytes(), gotRest)
		}
		delete(exp.Header, "Content-Length") // (Write sends none for a body-less DELETE or OPTIONS, the Client 0; both read as 0)
		delete(got.Header, "Content-Length")
		if got.Method != exp.Method || got.RequestURI != exp.RequestURI || got.Host != exp.Host || got.ContentLength != exp.ContentLength && !(got.ContentLength <= 0 && exp.ContentLength <= 0 && len(inBody) == 0) ||
			!reflect.DeepEqual(got.Header, exp.Header) || !bytes.Equal(gotBody, expBody) {
			t.Fatalf("for %q\nthe Client wrote        %q\nhttp.Request.Write wrote %q", raw.String(), out.Bytes(), want.Bytes())
		}
	})
}

// rawJoin is the escaped path ReverseProxy's SetURL makes of the
// upstream's prefix and u's path, when it differs from the plain join.
func rawJoin(up, u *url.URL) string {
	if u.RawPath == "" {
		return ""
	}
	return up.EscapedPath() + u.EscapedPath()
}

// readBack reads one request from b: the request, its body and what
// follows it.
func readBack(b []byte) (*http.Request, []byte, []byte, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, nil, err
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, nil, nil, err
	}
	rest, _ := io.ReadAll(br)
	return r, body, rest, nil
}
