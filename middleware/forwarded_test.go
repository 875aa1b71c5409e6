package middleware

import (
	"net/netip"
	"strings"
	"testing"
)

func TestHostOf(t *testing.T) {
	tests := []struct {
		in       string
		wantHost string
		wantOK   bool
	}{
		{"203.0.113.7", "203.0.113.7", true},
		{"203.0.113.7:5123", "203.0.113.7", true},
		{"[2001:db8::1]:80", "2001:db8::1", true},
		{"[2001:db8::1]", "2001:db8::1", true},
		{"2001:db8::1", "2001:db8::1", true},
		{"::ffff:203.0.113.7", "::ffff:203.0.113.7", true},
		{"fe80::1%eth0", "fe80::1%eth0", true},
		{"", "", false},
		{"unknown", "", false},
		{"_hidden", "", false},
		{"203.0.113.7:", "", false},
		{"203.0.113.7:http", "", false},
		{"203.0.113.7:1234567", "", false},
		{"[2001:db8::1", "", false},
		{"[2001:db8::1]x", "", false},
		{"[203.0.113.7]:80", "203.0.113.7", true},
		{"example.com", "", false},
		{"1.2.3", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, host, ok := hostOf(tt.in)
			if host != tt.wantHost || ok != tt.wantOK {
				t.Errorf("hostOf(%q) = %q, %v, want %q, %v", tt.in, host, ok, tt.wantHost, tt.wantOK)
			}
		})
	}
}

func TestParseTrustedProxies(t *testing.T) {
	tests := []struct {
		in      string
		want    string // the prefixes joined by " ", or the error's start
		wantErr bool
	}{
		{"", "", false},
		{"10.0.0.0/8", "10.0.0.0/8", false},
		{" 10.1.2.3/8 , 2001:db8::/32,,", "10.0.0.0/8 2001:db8::/32", false},
		{"192.0.2.1", "192.0.2.1/32", false},
		{"2001:db8::1", "2001:db8::1/128", false},
		{"10.0.0.0/33", "middleware: trusted proxy", true},
		{"proxy.internal", "middleware: trusted proxy", true},
		{"::ffff:10.0.0.0/104", "middleware: trusted proxy", true},
		{"fe80::1%eth0", "middleware: trusted proxy", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTrustedProxies(tt.in)
			if tt.wantErr {
				if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
					t.Fatalf("ParseTrustedProxies(%q) error = %v, want %q…", tt.in, err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTrustedProxies(%q): %v", tt.in, err)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if g := strings.Join(s, " "); g != tt.want {
				t.Errorf("ParseTrustedProxies(%q) = %q, want %q", tt.in, g, tt.want)
			}
		})
	}
}

func TestAppendForwardedFor(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`for=192.0.2.60;proto=http;by=203.0.113.43`, []string{"192.0.2.60"}},
		{`for=192.0.2.43, for=198.51.100.17`, []string{"192.0.2.43", "198.51.100.17"}},
		{`For="[2001:db8:cafe::17]:4711"`, []string{"[2001:db8:cafe::17]:4711"}},
		{`proto=https;for="192.0.2.1"`, []string{"192.0.2.1"}},
		{`for=unknown, for=192.0.2.1`, []string{"unknown", "192.0.2.1"}},
		{`proto=https, for=192.0.2.1`, []string{"", "192.0.2.1"}},               // an element without for=
		{`for=192.0.2.1;for=192.0.2.2`, []string{""}},                           // repeated for=
		{`for="192.0.2.1`, []string{""}},                                        // unterminated quote
		{`for="192.0.2.1\"x"`, []string{""}},                                    // escape: no address has one
		{`for="192.0.2.1" junk`, []string{""}},                                  // junk after a quoted value
		{`for`, []string{""}},                                                   // a parameter without a value
		{`for=192.0.2.1, , for=192.0.2.2,`, []string{"192.0.2.1", "192.0.2.2"}}, // empty elements
		{``, nil},
		{`for="a,b;c", for=192.0.2.2`, []string{"a,b;c", "192.0.2.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := appendForwardedFor(nil, tt.in)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("appendForwardedFor(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzForwardedFor checks the forwarding-header parsers on any input: they
// never panic; the address they return is the peer or an address written
// in the header, as text that parses to it; and when the peer is untrusted
// nothing in the header matters.
func FuzzForwardedFor(f *testing.F) {
	seeds := []struct{ xff, fwd string }{
		{"203.0.113.7", "for=203.0.113.7"},
		{"198.51.100.1, 10.0.0.2", "for=198.51.100.1, for=10.0.0.2"},
		{"1.1.1.1, 2.2.2.2, 10.0.0.1, 10.0.0.2", `for=1.1.1.1;proto=https, for="[2001:db8::1]:443", for=10.0.0.3`},
		{"garbage, 10.0.0.9", "for=unknown, for=10.0.0.9"},
		{"[2001:db8::7]:1234,, ,10.0.0.1", `for="[2001:db8::7]:1234"`},
		{"::ffff:10.0.0.1, ::ffff:198.51.100.9", `for="_hidden";by=x, for=10.1.1.1`},
		{",,,", `for="\"", ;;;,,=`},
		{strings.Repeat("10.0.0.1, ", 100) + "198.51.100.3", strings.Repeat("for=10.0.0.1,", 200)},
	}
	for _, s := range seeds {
		f.Add(s.xff, s.fwd, "10.0.0.2:5555")
		f.Add(s.xff, s.fwd, "198.51.100.200:1")
		f.Add(s.xff, s.fwd, "[fd00::1]:80")
	}
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, xff, fwd, remote string) {
		peer, peerHost, ok := hostOf(remote)
		if !ok {
			return
		}
		chain := map[string]bool{peerHost: true}
		for e := range strings.SplitSeq(xff, ",") {
			if _, h, ok := hostOf(strings.TrimSpace(e)); ok {
				chain[h] = true
			}
		}
		for _, e := range appendForwardedFor(nil, fwd) {
			if _, h, ok := hostOf(e); ok {
				chain[h] = true
			}
		}
		for name, fn := range map[string]func([]string, []netip.Prefix, netip.Addr, string) (netip.Addr, string){
			"X-Forwarded-For": clientFromXFF, "Forwarded": clientFromForwarded,
		} {
			in := xff
			if name == "Forwarded" {
				in = fwd
			}
			a, host := fn([]string{in}, proxies, peer, peerHost)
			if !chain[host] {
				t.Fatalf("%s %q from %s: got %q, not in the chain", name, in, remote, host)
			}
			if pa, err := netip.ParseAddr(host); err != nil || pa != a {
				t.Fatalf("%s %q from %s: host %q does not parse to %v (%v)", name, in, remote, host, a, err)
			}
			id := &Identifier{TrustedProxies: proxies, ForwardedHeader: name}
			if !trusted(proxies, peer) {
				// Untrusted peer: the header is never read.
				if got := id.clientForTest(remote, name, in); got != peerHost {
					t.Fatalf("%s %q from untrusted %s: got %q, want the peer %q", name, in, remote, got, peerHost)
				}
			}
		}
	})
}

// clientForTest is clientHost on a request from remote with header name
// set to value.
func (id *Identifier) clientForTest(remote, name, value string) string {
	r := newRequest(remote)
	r.Header[name] = []string{value}
	return id.clientHost(r)
}
