package http1

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// answerCases are handlers whose answers the loop must write as net/http
// does, byte for byte but for the order of the header lines.
var answerCases = map[string]http.HandlerFunc{
	"plain": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-A"] = []string{"1", "2"}
		io.WriteString(w, "hello")
	},
	"blanks around values": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-A"] = []string{"  a  ", "\tb\t", " ", ""}
		io.WriteString(w, "x")
	},
	"line breaks in values": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-A"] = []string{"a\r\nb", "a\n", " a\nb", "\r\n", "a\rb\r", "\n a \n", " \r a"}
		io.WriteString(w, "x")
	},
	"invalid names": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Bad Name"] = []string{"1"}
		w.Header()["Bad:Name"] = []string{"1"}
		w.Header()[""] = []string{"1"}
		w.Header()["x-lower"] = []string{"1"}
		io.WriteString(w, "x")
	},
	"long value": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Long"] = []string{strings.Repeat("v", 3000), strings.Repeat("w", 5000) + "\n" + strings.Repeat("w", 100)}
		w.Header()["X-Short"] = []string{"s"}
		io.WriteString(w, "x")
	},
	"many headers": func(w http.ResponseWriter, r *http.Request) {
		for i := range 200 {
			w.Header()["X-H"+strings.Repeat("h", i%40)+string(rune('a'+i%26))+string(rune('a'+i/26))] = []string{strings.Repeat("v", i)}
		}
		io.WriteString(w, "x")
	},
	"status and no body": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-A"] = []string{"1"}
		w.WriteHeader(http.StatusNoContent)
	},
	"unknown status": func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(599)
		io.WriteString(w, "x")
	},
	"interim answer": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Link"] = []string{"</a.css>; rel=preload", " b\n"}
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "x")
	},
	"chunked with trailers": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Trailer"] = []string{"X-T"}
		io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		w.Header()["X-T"] = []string{" t\r\n1 ", "t2"}
		w.Header()[http.TrailerPrefix+"X-U"] = []string{"u\n"}
	},
}

// TestServerWritesAnswersAsNetHTTP runs every answer case on the loop and
// on a bare net/http server and wants the same bytes, the header lines
// compared as a set (net/http sorts them) and Date left out.
func TestServerWritesAnswersAsNetHTTP(t *testing.T) {
	mux := http.NewServeMux()
	for name, h := range answerCases {
		mux.Handle("/"+strings.ReplaceAll(name, " ", "-"), h)
	}
	loopAddr, stdAddr := startServers(t, mux)
	for name := range answerCases {
		t.Run(name, func(t *testing.T) {
			raw := "GET /" + strings.ReplaceAll(name, " ", "-") + " HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
			got, want := rawAnswer(t, loopAddr, raw), rawAnswer(t, stdAddr, raw)
			if got != want {
				t.Errorf("the loop answered\n%q\nnet/http answered\n%q", got, want)
			}
		})
	}
}

// rawAnswer sends raw and returns all the server sent until it closed the
// connection, each header block's lines sorted and its Date line left out.
func rawAnswer(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := send(t, addr, raw)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rest := string(b)
	for strings.HasPrefix(rest, "HTTP/1.1 ") {
		head, body, _ := strings.Cut(rest, "\r\n\r\n")
		lines := strings.Split(head, "\r\n")
		fields := slices.DeleteFunc(lines[1:], func(l string) bool { return strings.HasPrefix(l, "Date: ") })
		slices.Sort(fields)
		out.WriteString(lines[0] + "\r\n" + strings.Join(fields, "\r\n") + "\r\n\r\n")
		rest = body
		if !strings.HasPrefix(lines[0], "HTTP/1.1 1") {
			break // a final answer: its body follows
		}
	}
	out.WriteString(rest)
	return out.String()
}

// TestValidFieldName: validFieldName, four bytes a step, agrees with a
// byte by byte check on every byte in every position.
func TestValidFieldName(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				want := strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0 || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
				if got := validFieldName(string(b)); got != want {
					t.Fatalf("validFieldName(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
	if validFieldName("") {
		t.Error(`validFieldName("") = true`)
	}
}
