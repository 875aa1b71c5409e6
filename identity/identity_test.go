package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/clientkey"
)

func TestClientID(t *testing.T) {
	full := Identity{User: "alice", APIKey: "k1", IP: "203.0.113.7"}
	tests := []struct {
		id   Identity
		kind string
		bits int
		want string
	}{
		{full, "user", 0, "user:alice"},
		{full, "api_key", 0, "api_key:k1"},
		{full, "ip", 0, "ip:203.0.113.7"},
		{full, "client", 0, "user:alice"},
		{Identity{APIKey: "k1", IP: "203.0.113.7"}, "client", 0, "api_key:k1"},
		{Identity{IP: "203.0.113.7"}, "client", 0, "ip:203.0.113.7"},
		{Identity{IP: "203.0.113.7"}, "user", 0, ""},
		{Identity{}, "client", 0, ""},
		{Identity{IP: "2001:db8:1:2:3:4:5:6"}, "ip", 0, "ip:2001:db8:1:2::/64"},
		{Identity{IP: "[2001:db8:1:2:3:4:5:6]"}, "ip", 48, "ip:2001:db8:1::/48"},
		{Identity{IP: "2001:db8:1:2:3:4:5:6"}, "ip", 128, "ip:2001:db8:1:2:3:4:5:6"},
		{Identity{IP: "::ffff:198.51.100.1"}, "ip", 0, "ip:198.51.100.1"},
		{Identity{IP: "fe80::1%eth0"}, "ip", 0, "ip:fe80::/64"},
	}
	for _, tt := range tests {
		if got := tt.id.ClientID(tt.kind, tt.bits); got != tt.want {
			t.Errorf("%+v.ClientID(%q, %d) = %q, want %q", tt.id, tt.kind, tt.bits, got, tt.want)
		}
	}
}

func TestAppendIPKeyNoAlloc(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:1:2:3:4:5:6")
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = appendIPKey(buf[:0], a, 64) }); n != 0 {
		t.Errorf("appendIPKey allocs = %v, want 0", n)
	}
}

func TestDigestIDs(t *testing.T) {
	long := strings.Repeat("u", 257)
	digest := func(v string) string {
		sum := sha256.Sum256([]byte(v))
		return clientkey.DigestPrefix + hex.EncodeToString(sum[:clientkey.DigestLen/2])
	}
	tests := []struct {
		id   Identity
		kind string
		want string
	}{
		{Identity{User: strings.Repeat("u", 256)}, "user", "user:" + strings.Repeat("u", 256)},
		{Identity{User: long}, "user", "user:" + digest(long)},
		{Identity{User: "al\x7fice"}, "user", "user:" + digest("al\x7fice")},
		{Identity{User: "a\u0085b"}, "user", "user:" + digest("a\u0085b")},
		{Identity{User: "al\xffice"}, "user", "user:" + digest("al\xffice")},
		{Identity{User: "h:" + strings.Repeat("0", 32)}, "user", "user:" + digest("h:"+strings.Repeat("0", 32))},
		{Identity{User: "zoë 東京"}, "user", "user:zoë 東京"},
		{Identity{APIKey: "k\x00"}, "api_key", "api_key:" + digest("k\x00")},
		{Identity{APIKey: long}, "client", "api_key:" + digest(long)},
		{Identity{IP: "not-an-ip"}, "ip", "ip:" + digest("not-an-ip")},
		{Identity{IP: "[2001:db8::1]:443"}, "ip", "ip:2001:db8::/64"},
		{Identity{IP: "203.0.113.7:80"}, "ip", "ip:203.0.113.7"},
		{Identity{IP: "[203.0.113.7]"}, "ip", "ip:203.0.113.7"},
	}
	for _, tt := range tests {
		if got := tt.id.ClientID(tt.kind, 0); got != tt.want {
			t.Errorf("%q.ClientID(%q) = %q, want %q", tt.id, tt.kind, got, tt.want)
		}
	}
	if got := len("user:" + digest(long)); got > MaxID {
		t.Errorf("a digest id is %d bytes, more than MaxID %d", got, MaxID)
	}
}

func TestAppendNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 3*MaxID)
	long := strings.Repeat("k", 1000)
	for _, f := range []func(){
		func() { buf = AppendUser(buf[:0], "alice") },
		func() { buf = AppendAPIKey(buf[:0], long) },
		func() { buf = AppendIP(buf[:0], "2001:db8::1", 64) },
		func() { buf = AppendIP(buf[:0], "203.0.113.7", 64) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("allocs = %v, want 0", n)
		}
	}
}

func BenchmarkAppendClientIDs(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 3*MaxID)
	for b.Loop() {
		buf = AppendUser(buf[:0], "alice")
		buf = AppendAPIKey(buf, "k_live_42")
		buf = AppendIP(buf, "2001:db8::1", 64)
	}
}

var ipv4Seeds = []string{
	"203.0.113.7", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3",
	".1.2.3", "1.2.3.", "1.2.3.4:80", "::ffff:1.2.3.4", "1.2.3.4%eth0", "", "1.2.3.04", "1.2.3.0", "1.2.3.255x",
	"2001:db8::1", "999.1.1.1", "1.2.3.4 ",
}

// FuzzParseIPv4: parseIPv4 takes what netip.ParseAddr takes as an IPv4
// address, as the same address, which netip spells as it was written.
func FuzzParseIPv4(f *testing.F) {
	for _, s := range ipv4Seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseIPv4(s)
		want, err := netip.ParseAddr(s)
		if wantOK := err == nil && want.Is4(); ok != wantOK || got != want && ok {
			t.Fatalf("parseIPv4(%q) = %v, %v; netip.ParseAddr: %v, %v", s, got, ok, want, err)
		}
		if ok && got.String() != s {
			t.Fatalf("parseIPv4(%q) = %v, spelled otherwise", s, got)
		}
		var a, b [MaxID]byte
		fast := string(AppendIP(a[:0], s, 64))
		slow := string(appendIPSlow(b[:0], s, 64))
		if fast != slow {
			t.Fatalf("AppendIP(%q) = %q, want %q", s, fast, slow)
		}
	})
}

// appendIPSlow is AppendIP through netip alone.
func appendIPSlow(dst []byte, ip string, bits int) []byte {
	if ip == "" {
		return dst
	}
	dst = append(dst, prefixIP...)
	if a, err := parseIPAny(ip); err == nil {
		return appendIPKey(dst, a, bits)
	}
	return clientkey.AppendDigest(dst, ip)
}
