package identity

import (
	"net/netip"
	"testing"
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
	if n := testing.AllocsPerRun(100, func() { buf = AppendIPKey(buf[:0], a, 64) }); n != 0 {
		t.Errorf("AppendIPKey allocs = %v, want 0", n)
	}
}
