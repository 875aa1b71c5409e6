package admin

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// malformedTokens are --admin-token values that hold no usable token, or
// an entry that is one by mistake. Each once parsed to no token at all,
// and so to no authentication (`--admin-token ' '`).
var malformedTokens = []string{
	" ", ",", " , ", ",,", "\t",
	"s3cret,", ",s3cret", "a,,b", "a, ,b", // a blank entry beside good ones
	"alice:", "alice: ", ":s1", ":", // a name without a secret, a secret without a name
	"two words", "two words:s1", "s3\x00cret", "s3\ncret", "\xffs3cret", // what no Authorization header carries
}

// TestBlankTokenIsNoToken: a malformed --admin-token turns authentication
// on and accepts no one — whatever the caller sends — and Err says which
// entry is wrong; CheckBind refuses it on any address.
func TestBlankTokenIsNoToken(t *testing.T) {
	for _, in := range malformedTokens {
		tk := ParseTokens(in)
		if !tk.Set() {
			t.Errorf("ParseTokens(%q) is no token: the admin API would run without authentication", in)
		}
		if err := tk.Err(); err == nil {
			t.Errorf("ParseTokens(%q).Err() = nil, want why it is malformed", in)
		} else if sec := strings.TrimSpace(strings.Trim(in, ", :")); len(sec) > 2 && strings.Contains(err.Error(), sec) {
			t.Errorf("ParseTokens(%q).Err() = %q shows the token", in, err)
		}
		for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer  ", "Bearer ,", "Bearer a", "Bearer b", "Bearer s3cret",
			"Bearer alice:", "Bearer alice", "Bearer :s1", "Bearer two words", "Bearer two"} {
			req := httptest.NewRequest("GET", "/rules", nil)
			req.Header.Set("Authorization", auth)
			if _, ok := tk.Check(req); ok {
				t.Errorf("ParseTokens(%q) accepts %q", in, auth)
			}
		}
		for _, addr := range []string{"0.0.0.0:9090", "127.0.0.1:9090"} {
			if err := CheckBind(addr, in); err == nil || !strings.Contains(err.Error(), "--admin-token") {
				t.Errorf("CheckBind(%q, %q) = %v, want an error naming --admin-token", addr, in, err)
			}
		}
	}
}

// TestBlankTokenServesNoOne is the attack end to end at the handler: an
// admin API started with --admin-token ' , ' answers an unauthenticated
// PUT 401, not 200.
func TestBlankTokenServesNoOne(t *testing.T) {
	for _, tok := range []string{" ", ",", " , "} {
		e := newEnv(t, Config{Token: tok})
		e.must(e.do("PUT", "/rules/pwned", ruleA), 401)
		e.must(e.do("GET", "/rules", ""), 401)
		if e.revision() != 0 {
			t.Fatalf("--admin-token %q: an unauthenticated PUT changed the rules", tok)
		}
	}
}
