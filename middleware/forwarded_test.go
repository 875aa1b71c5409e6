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

func TestWithoutObfuscatedPort(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.43:_p1": "192.0.2.43", "[2001:db8::1]:_p1": "[2001:db8::1]", "192.0.2.43:80": "192.0.2.43:80",
		"2001:db8::1": "2001:db8::1", "_hidden": "_hidden", "2001:db8::_1": "2001:db8::_1", "[::1]:_": "[::1]",
	} {
		if got := withoutObfuscatedPort(in); got != want {
			t.Errorf("withoutObfuscatedPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestForwardedFor(t *testing.T) {
	tests := []struct {
		in     string
		want   string
		wantOK bool
	}{
		{`for=192.0.2.60;proto=http;by=203.0.113.43`, "192.0.2.60", true},
		{`For="[2001:db8:cafe::17]:4711"`, "[2001:db8:cafe::17]:4711", true},
		{`proto=https;for="192.0.2.1"`, "192.0.2.1", true},
		{` for=192.0.2.1 ; proto=https `, "192.0.2.1", true},
		{`for=192.0.2.1;;proto=https;`, "192.0.2.1", true},
		{`for=[2001:db8::1]:80`, "[2001:db8::1]:80", true}, // unquoted, as sloppy proxies write it
		{`for=unknown`, "unknown", true},
		{`for="_hidden"`, "_hidden", true},
		{`proto=https`, "", false},                 // no for=
		{`for=192.0.2.1;for=192.0.2.2`, "", false}, // repeated for=
		{`for="192.0.2.1`, "", false},              // unterminated quote
		{`for="192.0.2.1\"x"`, "", false},          // escape: no address has one
		{`for="192.0.2.1" junk`, "", false},        // junk after a quoted value
		{`for="192.0.2.1"x`, "", false},            // junk after a quoted value
		{`for=192.0.2.1"`, "", false},              // a quote in an unquoted value
		{`for=192.0.2.1 x`, "", false},             // junk after a value
		{`for`, "", false},                         // a parameter without a value
		{`=192.0.2.1`, "", false},                  // a value without a name
		{`proto=https;for`, "", false},             // a parameter without a value
		{`b;c", for=192.0.2.2`, "", false},         // a cut quoted value
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := forwardedFor(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("forwardedFor(%q) = %q, %v, want %q, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// A malformed Forwarded or X-Forwarded-For header from a client never
// names the trusted proxy: the element the proxy appended decides.
func TestMalformedForwardingHeader(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	const client = "198.51.100.23"
	fwd := []string{
		`for="1.2.3.4`, `for="1.2.3.4;proto=https`, `for=1.2.3.4"`, `for="[2001:db8::1]`,
		`for=1.2.3.4;for=5.6.7.8`, `for`, `;;;=`, `"`, `for="\"`, `for="a,b`, `unknown`, `for=_hidden`,
		`for=10.0.0.7`, `for="1.2.3.4" junk`, `proto=https`, "for=1.2.3.4\x00",
	}
	for _, h := range fwd {
		for _, values := range [][]string{
			{h + ", for=" + client},            // the proxy appended to the line
			{h + `, for="` + client + `:_p1"`}, // an obfuscated port
			{h + ",for=" + client + ";proto=http"},
			{h, "for=" + client},                       // the proxy added a line
			{h + ", for=" + client + ", for=10.0.0.3"}, // two trusted proxies
		} {
			a, host := clientFromForwarded(values, proxies, netip.MustParseAddr("10.0.0.2"), "10.0.0.2")
			if host != client || a != netip.MustParseAddr(client) {
				t.Errorf("Forwarded %q from a trusted proxy: caller %q, want %q", values, host, client)
			}
		}
	}
	xff := []string{`"1.2.3.4`, `[2001:db8::1`, `1.2.3.4:99999`, `unknown`, `_hidden`, `1.2.3.4]`, `,,,`, `10.0.0.7`, "x\x00y", `for=1.2.3.4`}
	for _, h := range xff {
		for _, values := range [][]string{{h + ", " + client}, {h + "," + client + ":5123"}, {h, client}, {h + ", " + client + ", 10.0.0.3"}} {
			a, host := clientFromXFF(values, proxies, netip.MustParseAddr("10.0.0.2"), "10.0.0.2")
			if host != client || a != netip.MustParseAddr(client) {
				t.Errorf("X-Forwarded-For %q from a trusted proxy: caller %q, want %q", values, host, client)
			}
		}
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
		{`"1.2.3.4, [::1`, `for="1.2.3.4`},
		{"unknown, _hidden", `for="1.2.3.4;proto=https, for=_hidden`},
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
		for e := range strings.SplitSeq(fwd, ",") {
			if v, ok := forwardedFor(strings.TrimSpace(e)); ok {
				if _, h, ok := hostOf(withoutObfuscatedPort(v)); ok {
					chain[h] = true
				}
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
			// Whatever the client wrote, the untrusted address a trusted
			// proxy appends after it is the caller.
			const client = "198.51.100.77"
			appended := in + ", " + client
			if name == "Forwarded" {
				appended = in + ", for=" + client
			}
			if got, h := fn([]string{appended}, proxies, netip.MustParseAddr("10.0.0.2"), "10.0.0.2"); h != client || got != netip.MustParseAddr(client) {
				t.Fatalf("%s %q appended to by a trusted proxy: got %q, want %q", name, appended, h, client)
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
