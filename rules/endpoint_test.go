package rules

import (
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in      string
		want    Endpoint
		wantErr string // substring; "" = valid
	}{
		{"GET /api/orders", Endpoint{"GET", "/api/orders", false}, ""},
		{"* /api/*", Endpoint{"*", "/api", true}, ""},
		{"POST /login", Endpoint{"POST", "/login", false}, ""},
		{"GET /", Endpoint{"GET", "/", false}, ""},
		{"GET /*", Endpoint{"GET", "", true}, ""},
		{"* /*", Endpoint{"*", "", true}, ""},
		{"GET //*", Endpoint{"GET", "/", true}, ""},
		{"GET /api/", Endpoint{"GET", "/api/", false}, ""},
		{"PROPFIND /dav/*", Endpoint{"PROPFIND", "/dav", true}, ""},
		{"GET /ünï/códe", Endpoint{"GET", "/ünï/códe", false}, ""},
		{"/api/orders", Endpoint{}, `want "METHOD /path", e.g. "GET /api/orders"`},
		{"", Endpoint{}, `want "METHOD /path"`},
		{"GET", Endpoint{}, `want "METHOD /path"`},
		{"get /x", Endpoint{}, "uppercase HTTP method"},
		{"G3T /x", Endpoint{}, "uppercase HTTP method"},
		{"ABCDEFGHIJKLMNOPQ /x", Endpoint{}, "at most 16"},
		{" GET /x", Endpoint{}, "uppercase HTTP method"},
		{"GET  /x", Endpoint{}, "exactly one space"},
		{"GET x", Endpoint{}, `the path must start with "/"`},
		{"GET ", Endpoint{}, `the path must start with "/"`},
		{"GET /a b", Endpoint{}, "whitespace"},
		{"GET /a\tb", Endpoint{}, "whitespace"},
		{"GET /a\x00", Endpoint{}, "control"},
		{"GET /a\u00a0", Endpoint{}, "whitespace"},
		{"GET /api*", Endpoint{}, `only allowed as a final "/*"`},
		{"GET /*/x", Endpoint{}, `only allowed as a final "/*"`},
		{"GET /a/**", Endpoint{}, `only allowed as a final "/*"`},
		{"GET /a/*/*", Endpoint{}, `only allowed as a final "/*"`},
		{"GET /\xff", Endpoint{}, "UTF-8"},
		{"GET /" + strings.Repeat("a", 507), Endpoint{"GET", "/" + strings.Repeat("a", 507), false}, ""},
		{"GET /" + strings.Repeat("a", 508), Endpoint{}, "at most 512 bytes"},
	}
	for _, tt := range tests {
		got, err := ParseEndpoint(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "endpoint: ") {
				t.Errorf("ParseEndpoint(%q) = %v, %v, want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseEndpoint(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.in {
			t.Errorf("ParseEndpoint(%q).String() = %q, want the input", tt.in, s)
		}
	}
	if _, err := ParseEndpoint("/api/orders"); err == nil || err.Error() != `endpoint: want "METHOD /path", e.g. "GET /api/orders"` {
		t.Errorf(`ParseEndpoint("/api/orders") = %v, want the exact "METHOD /path" message`, err)
	}
}

func TestEndpointMatches(t *testing.T) {
	tests := []struct {
		pattern      string
		method, path string
		want         bool
	}{
		{"GET /api/orders", "GET", "/api/orders", true},
		{"GET /api/orders", "POST", "/api/orders", false},
		{"GET /api/orders", "get", "/api/orders", true},  // some servers route "get" as GET
		{"GET /api/orders", "HEAD", "/api/orders", true}, // HEAD runs the GET handler
		{"HEAD /api/orders", "GET", "/api/orders", false},
		{"POST /api/orders", "HEAD", "/api/orders", false},
		{"GET /api/orders", "GET", "/api/orders/", true},
		{"GET /api/orders", "GET", "//api//orders/", true},
		{"GET /api/orders", "GET", "/api/%6frders", true},
		{"GET /api/orders", "GET", "/api%2Forders", true},
		{"GET /api/orders", "GET", "/api/orders;jsessionid=1", true},
		{"GET /api/orders", "GET", "/api/x/../orders?q=1", true},
		{"GET /api/orders", "GET", "/API/orders", false},
		{"GET /api/orders/", "GET", "/api/orders", true}, // the pattern's path is clean too
		{"GET /api/orders", "GET", "/api/orders/1", false},
		{"GET /api/orders", "GET", "/api/order", false},
		{"* /api/orders", "DELETE", "/api/orders", true},
		// Prefix: the base itself, with a trailing slash, and anything under it.
		{"* /api/*", "GET", "/api", true},
		{"* /api/*", "GET", "/api/", true},
		{"* /api/*", "GET", "/api/orders", true},
		{"* /api/*", "GET", "/api/orders/1/items", true},
		{"* /api/*", "GET", "/api//x", true},
		{"* /api/*", "GET", "/apix", false},
		{"* /api/*", "GET", "/apix/y", false},
		{"* /api/*", "GET", "/ap", false},
		{"* /api/*", "GET", "/", false},
		{"* /api/*", "GET", "", false},
		{"* /api/*", "GET", "/v1/api/x", false},
		{"GET /api/*", "POST", "/api/x", false},
		{"* /api/v1/*", "GET", "/api/v1", true},
		{"* /api/v1/*", "GET", "/api/v2", false},
		{"* /api/v1/*", "GET", "/api", false},
		{"* /*", "GET", "/", true},
		{"* /*", "GET", "/anything/at/all", true},
		{"* /*", "GET", "", true},
		{"GET /*", "HEAD", "/", true},
		{"POST /*", "HEAD", "/", false},
		{"* //*", "GET", "/", true},
		{"* //*", "GET", "//x", true},
		{"* //*", "GET", "/x", true},
		{"GET /", "GET", "/", true},
		{"GET /", "GET", "/x", false},
	}
	for _, tt := range tests {
		e, err := ParseEndpoint(tt.pattern)
		if err != nil {
			t.Fatalf("ParseEndpoint(%q) = %v", tt.pattern, err)
		}
		if got := e.Matches(tt.method, tt.path); got != tt.want {
			t.Errorf("ParseEndpoint(%q).Matches(%q, %q) = %v, want %v", tt.pattern, tt.method, tt.path, got, tt.want)
		}
	}
}
