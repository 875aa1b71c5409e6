package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// TestServeJSONDecoder: --json-decoder (SLUICE_JSON_DECODER) picks the
// reader of the check API's bodies — the malformed body's message carries
// the words of the one chosen — and an unknown value stops sluice at start,
// named.
func TestServeJSONDecoder(t *testing.T) {
	rules := writeFile(t, t.TempDir(), "rules.yaml", perUser)
	tests := []struct {
		name string
		args []string
		env  string // SLUICE_JSON_DECODER
		want string // in the answer to a malformed body: encoding/json's has no more words
	}{
		{"default", nil, "", "unexpected end of input at offset 8, want a value"},
		{"flag std", []string{"--json-decoder", "std"}, "", `unexpected end of input at offset 8"`},
		{"environment std", nil, "std", `unexpected end of input at offset 8"`},
		{"flag wins", []string{"--json-decoder", "fast"}, "std", "unexpected end of input at offset 8, want a value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("SLUICE_JSON_DECODER", tt.env)
			}
			data := listentest.FreeAddr(t)
			args := append([]string{"serve", "--rules", rules, "--listen", data, "--grpc-listen", "", "--admin-listen", "127.0.0.1:0"}, tt.args...)
			s := start(t, args...)
			base := "http://" + data
			s.waitUp(t, http.DefaultClient, base+"/healthz")
			if code, body := check(t, http.DefaultClient, base, "", `{"user":`); code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("a malformed body = %d %s, want 400 containing %q", code, body, tt.want)
			}
			if code, body := check(t, http.DefaultClient, base, "", `{"user":"alice"}`); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
				t.Errorf("a check = %d %s, want 200 allowed", code, body)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		code, stderr := sluiceFor(t, 3*time.Second, "serve", "--rules", rules, "--listen", "127.0.0.1:0", "--grpc-listen", "",
			"--admin-listen", "127.0.0.1:0", "--json-decoder", "jsoniter")
		if want := `--json-decoder (SLUICE_JSON_DECODER) "jsoniter": want fast or std`; code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("--json-decoder jsoniter = exit %d, %q; want 1 and %q", code, stderr, want)
		}
	})
}
