package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// TestEnvoyFixtures serves envoyproxy/ratelimit's own configuration
// fixtures (testdata/envoyproxy-config, copied from its loader tests)
// through `sluice serve` as a runtime directory, alone and in the pairs
// its tests load together, and checks that each loads, or is refused, as
// its loader does (test/config/config_test.go there): a loaded one
// answers on /healthcheck and decides a descriptor by its limit; a
// refused one stops serve at start with an error naming the file and the
// problem.
func TestEnvoyFixtures(t *testing.T) {
	type call struct {
		entries string // JSON descriptor entries
		limit   int    // the requests_per_unit of the answer
	}
	tests := []struct {
		files   []string
		merge   bool
		refused string // "" when it loads
		check   *call
	}{
		{files: []string{"basic_config.yaml"}, check: &call{`{"key":"key1","value":"value1"},{"key":"subkey1","value":"x"}`, 5}},
		{files: []string{"basic_config.yaml", "duplicate_domain.yaml"}, refused: `domain "test-domain" is also the domain of config/basic_config.yaml`},
		{files: []string{"duplicate_domain.yaml"}},
		{files: []string{"bad_limit_unit.yaml"}, refused: `config/bad_limit_unit.yaml: line 6: key1=value1: rate_limit.unit: want one of second, minute, hour, day, week, month, year (any letter case), got "foo"`},
		{files: []string{"bad_yaml.yaml"}, refused: "config/bad_yaml.yaml: invalid YAML"},
		{files: []string{"duplicate_key.yaml"}, refused: `config/duplicate_key.yaml: line 6: key1=value1: a descriptor of this level already has key and value "key1_value1"`},
		{files: []string{"empty_domain.yaml"}, refused: "config/empty_domain.yaml: line 1: domain: required"},
		{files: []string{"empty_key.yaml"}, refused: "config/empty_key.yaml: line 3: =value1: key: required"},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, merge: true, check: &call{`{"key":"key2","value":"value2"}`, 20}},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, refused: "set MERGE_DOMAIN_CONFIG=true to merge"},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, merge: true, refused: `a descriptor of this level already has key and value "key1_value1"`},
		{files: []string{"metadata.yaml"}, check: &call{`{"key":"key2","value":"x"}`, 20}},
		{files: []string{"misspelled_key.yaml"}, refused: `config/misspelled_key.yaml: line 5: key1=value1: unknown key "ratelimit"`},
		{files: []string{"misspelled_key2.yaml"}, refused: `config/misspelled_key2.yaml: line 7: key1=value1: rate_limit: unknown key "requestsperunit"`},
		{files: []string{"non_map_list.yaml"}, refused: `config/non_map_list.yaml: line 3: a list here holds mappings only (descriptors, or replaces' {name: ...}), got "a"`},
		{files: []string{"non_string_key.yaml"}, refused: `config/non_string_key.yaml: line 1: unknown key "0.25"`},
		{files: []string{"replaces_empty.yaml"}, refused: "config/replaces_empty.yaml: line 10: key1=value1 > subkey1: rate_limit.replaces: name: required"},
		{files: []string{"replaces_self.yaml"}, refused: `config/replaces_self.yaml: line 10: key1=value1 > subkey1: rate_limit.replaces: "self" is this rate_limit's own name`},
		{files: []string{"shadowmode_config.yaml"}, check: &call{`{"key":"key1","value":"value1"},{"key":"subkey1","value":"subvalue1"}`, 10}},
		{files: []string{"share_threshold.yaml"}, check: &call{`{"key":"files","value":"files/a.pdf"}`, 100}},
		{files: []string{"unlimited_with_unit.yaml"}, refused: "config/unlimited_with_unit.yaml: line 6: foo: rate_limit.unit: an unlimited rate_limit takes no unit"},
		{files: []string{"wildcard.yaml"}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		name := strings.Join(tt.files, "+")
		if tt.merge {
			name += " MERGE_DOMAIN_CONFIG"
		}
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			conf := filepath.Join(root, "ratelimit", "config")
			if err := os.MkdirAll(conf, 0o755); err != nil {
				t.Fatal(err)
			}
			for i, f := range tt.files {
				seen[f] = true
				b, err := os.ReadFile(filepath.Join("testdata", "envoyproxy-config", f))
				if err != nil {
					t.Fatal(err)
				}
				dst := f
				if i > 0 && f == tt.files[0] { // the same file twice
					dst = "copy_of_" + f
				}
				if err := os.WriteFile(filepath.Join(conf, dst), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			port := strconv.Itoa(listentest.FreePort(t))
			setenv(t, map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "HOST": "127.0.0.1", "PORT": port,
				"MERGE_DOMAIN_CONFIG": strconv.FormatBool(tt.merge)})
			args := []string{"serve", "--grpc-listen", "", "--admin-listen", listentest.FreeAddr(t)}
			if tt.refused != "" {
				code, _, errOut := sluice(t, "", args...)
				if code == 0 || !strings.Contains(errOut, tt.refused) {
					t.Errorf("serve: exit %d, %q; want it refused with %q", code, errOut, tt.refused)
				}
				return
			}
			s := start(t, args...)
			base := "http://127.0.0.1:" + port
			s.waitUp(t, http.DefaultClient, base+"/healthcheck")
			if tt.check == nil {
				return
			}
			r, err := http.Post(base+"/json", "application/json",
				strings.NewReader(`{"domain":"test-domain","descriptors":[{"entries":[`+tt.check.entries+`]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			if b := body(r); r.StatusCode != 200 || !strings.Contains(b, `"requestsPerUnit":`+strconv.Itoa(tt.check.limit)+`,`) {
				t.Errorf("POST /json %s = %d %s, want requestsPerUnit %d", tt.check.entries, r.StatusCode, b, tt.check.limit)
			}
		})
	}
	fixtures, _ := filepath.Glob(filepath.Join("testdata", "envoyproxy-config", "*.yaml"))
	for _, f := range fixtures {
		if !seen[filepath.Base(f)] {
			t.Errorf("fixture %s is not checked", f)
		}
	}
}
