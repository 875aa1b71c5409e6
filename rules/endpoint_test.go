package rules

import (
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in      string
		want    endpointPattern
		wantErr string // substring; "" = valid
	}{
		{"GET /api/orders", endpointPattern{"GET", "/api/orders", false}, ""},
		{"* /api/*", endpointPattern{"*", "/api", true}, ""},
		{"POST /login", endpointPattern{"POST", "/login", false}, ""},
		{"GET /", endpointPattern{"GET", "/", false}, ""},
		{"GET /*", endpointPattern{"GET", "", true}, ""},
		{"* /*", endpointPattern{"*", "", true}, ""},
		{"GET //*", endpointPattern{"GET", "/", true}, ""},
		{"GET /api/", endpointPattern{"GET", "/api/", false}, ""},
		{"PROPFIND /dav/*", endpointPattern{"PROPFIND", "/dav", true}, ""},
		{"GET /ünï/códe", endpointPattern{"GET", "/ünï/códe", false}, ""},
		{"/api/orders", endpointPattern{}, `want "METHOD /path", e.g. "GET /api/orders"`},
		{"", endpointPattern{}, `want "METHOD /path"`},
		{"GET", endpointPattern{}, `want "METHOD /path"`},
		{"get /x", endpointPattern{}, "uppercase HTTP method"},
		{"G3T /x", endpointPattern{}, "uppercase HTTP method"},
		{"ABCDEFGHIJKLMNOPQ /x", endpointPattern{}, "at most 16"},
		{" GET /x", endpointPattern{}, "uppercase HTTP method"},
		{"GET  /x", endpointPattern{}, "exactly one space"},
		{"GET x", endpointPattern{}, `the path must start with "/"`},
		{"GET ", endpointPattern{}, `the path must start with "/"`},
		{"GET /a b", endpointPattern{}, "whitespace"},
		{"GET /a\tb", endpointPattern{}, "whitespace"},
		{"GET /a\x00", endpointPattern{}, "control"},
		{"GET /a\u00a0", endpointPattern{}, "whitespace"},
		{"GET /api*", endpointPattern{}, `only allowed as a final "/*"`},
		{"GET /*/x", endpointPattern{}, `only allowed as a final "/*"`},
		{"GET /a/**", endpointPattern{}, `only allowed as a final "/*"`},
		{"GET /a/*/*", endpointPattern{}, `only allowed as a final "/*"`},
		{"GET /\xff", endpointPattern{}, "UTF-8"},
		{"GET /" + strings.Repeat("a", 507), endpointPattern{"GET", "/" + strings.Repeat("a", 507), false}, ""},
		{"GET /" + strings.Repeat("a", 508), endpointPattern{}, "at most 512 bytes"},
	}
	for _, tt := range tests {
		got, err := parseEndpoint(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "endpoint: ") {
				t.Errorf("parseEndpoint(%q) = %v, %v, want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseEndpoint(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.in {
			t.Errorf("parseEndpoint(%q).String() = %q, want the input", tt.in, s)
		}
	}
	if _, err := parseEndpoint("/api/orders"); err == nil || err.Error() != `endpoint: want "METHOD /path", e.g. "GET /api/orders"` {
		t.Errorf(`parseEndpoint("/api/orders") = %v, want the exact "METHOD /path" message`, err)
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
		e, err := parseEndpoint(tt.pattern)
		if err != nil {
			t.Fatalf("parseEndpoint(%q) = %v", tt.pattern, err)
		}
		if got := e.Matches(tt.method, tt.path); got != tt.want {
			t.Errorf("parseEndpoint(%q).Matches(%q, %q) = %v, want %v", tt.pattern, tt.method, tt.path, got, tt.want)
		}
	}
}
