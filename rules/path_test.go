package rules

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/urlpath"
)

// refCleanPath is the reference for urlpath.Clean, written from Paths in the
// package doc with strings and slices.
func refCleanPath(p string) string {
	if p == "" {
		return ""
	}
	p, _, _ = strings.Cut(p, "#")
	p, _, _ = strings.Cut(p, "?")
	var segs []string
	for _, raw := range strings.Split(p, "/") {
		raw, _, _ = strings.Cut(raw, ";")
		var dec strings.Builder
		for i := 0; i < len(raw); i++ {
			if raw[i] == '%' && i+2 < len(raw) && strings.ContainsRune("0123456789abcdefABCDEF", rune(raw[i+1])) &&
				strings.ContainsRune("0123456789abcdefABCDEF", rune(raw[i+2])) {
				v := strings.IndexByte("0123456789abcdef", strings.ToLower(raw[i+1 : i+2])[0])<<4 |
					strings.IndexByte("0123456789abcdef", strings.ToLower(raw[i+2 : i+3])[0])
				dec.WriteByte(byte(v))
				i += 2
				continue
			}
			dec.WriteByte(raw[i])
		}
		for _, s := range strings.Split(dec.String(), "/") {
			switch s {
			case "", ".":
			case "..":
				if len(segs) > 0 {
					segs = segs[:len(segs)-1]
				}
			default:
				segs = append(segs, s)
			}
		}
	}
	return "/" + strings.Join(segs, "/")
}

func TestCleanPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"/", "/"},
		{"/api/orders", "/api/orders"},
		// What the gateway folded and the Envoy and decision APIs did not.
		{"//api/orders", "/api/orders"},
		{"/api/orders/", "/api/orders"},
		{"/api//orders", "/api/orders"},
		{"/api/./orders", "/api/orders"},
		{"/api/x/../orders", "/api/orders"},
		{"/api/%6frders", "/api/orders"},
		{"/api/%6Frders", "/api/orders"},
		{"/api%2Forders", "/api/orders"},
		{"/api%2forders", "/api/orders"},
		{"/api/orders;jsessionid=1", "/api/orders"},
		{"/api;v=1/orders", "/api/orders"},
		{"/api/x/..;/orders", "/api/orders"},
		{"/api/%2e%2e/api/orders", "/api/orders"},
		{"/api/orders?q=1", "/api/orders"},
		{"/api/orders?q=" + strings.Repeat("x", 4100), "/api/orders"},
		{"/api/orders#frag", "/api/orders"},
		{"/api/orders%3Fq", "/api/orders?q"},
		{"/api/orders%3Bx", "/api/orders;x"},
		{"/a/%25%36%66", "/a/%6f"}, // decoded once
		{"/a/%zz/%4", "/a/%zz/%4"},
		{"/../../api/orders", "/api/orders"},
		{"/api/orders/..", "/api"},
		{"/..", "/"},
		{"api/orders", "/api/orders"},
		{"?x", "/"},
		{"/API/Orders", "/API/Orders"},
		{"/a/\x7f/\xff", "/a/\x7f/\xff"},
	}
	for _, tt := range tests {
		if got := urlpath.Clean(tt.in); got != tt.want {
			t.Errorf("urlpath.Clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := refCleanPath(tt.in); got != tt.want {
			t.Errorf("refCleanPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	clean := "/api/orders/17"
	if n := testing.AllocsPerRun(100, func() { _ = urlpath.Clean(clean) }); n != 0 {
		t.Errorf("urlpath.Clean of a clean path allocates %v times, want 0", n)
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"", "/", "//api/orders", "/api/./x/../orders/", "/api%2Forders;x=1?q", "/%2e%2e/%2E.", "a/b/..;/c", "/\xff%ff;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if len(p) > maxFuzzInput {
			return
		}
		got := urlpath.Clean(p)
		if want := refCleanPath(p); got != want {
			t.Fatalf("urlpath.Clean(%q) = %q, want %q", p, got, want)
		}
		if !urlpath.IsClean(got) && !strings.ContainsAny(got, "?#%;") {
			t.Fatalf("urlpath.IsClean(urlpath.Clean(%q) = %q) = false", p, got)
		}
		if urlpath.IsClean(p) && got != p {
			t.Fatalf("urlpath.IsClean(%q) but urlpath.Clean = %q", p, got)
		}
		if p != "" && (got == "" || got[0] != '/' || len(got) > 1 && got[len(got)-1] == '/') {
			t.Fatalf("urlpath.Clean(%q) = %q, want a path starting with / and without a trailing /", p, got)
		}
	})
}

func BenchmarkCleanPath(b *testing.B) {
	for _, p := range []string{"/api/v1/orders/42", "/api//v1/./orders/42/?q=1"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			var buf [1024]byte
			for b.Loop() {
				if !urlpath.IsClean(p) {
					_ = urlpath.AppendClean(buf[:0], p)
				}
			}
		})
	}
}

func TestMethodBit(t *testing.T) {
	for i, m := range knownMethods {
		for _, spelled := range []string{m, strings.ToLower(m)} {
			if got := methodBit(spelled); got != 1<<i {
				t.Errorf("methodBit(%q) = %#x, want %#x", spelled, got, 1<<i)
			}
		}
	}
	for _, m := range []string{"", "GETX", "PROPFIND", "GET|POST"} {
		if got := methodBit(m); got != methodOther {
			t.Errorf("methodBit(%q) = %#x, want methodOther", m, got)
		}
	}
}
