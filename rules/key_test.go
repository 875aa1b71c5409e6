package rules

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rulekey"
)

func TestParseBy(t *testing.T) {
	tests := []struct {
		by      By
		want    []rulekey.Part
		wantErr string
	}{
		{"", []rulekey.Part{{Kind: rulekey.Client}}, ""},
		{"global", []rulekey.Part{{Kind: rulekey.Global}}, ""},
		{"endpoint", []rulekey.Part{{Kind: rulekey.Endpoint}}, ""},
		{"api_key+endpoint", []rulekey.Part{{Kind: rulekey.APIKey}, {Kind: rulekey.Endpoint}}, ""},
		{"header:x-tenant", []rulekey.Part{{Kind: rulekey.Header, Name: "X-Tenant"}}, ""},
		{"entry:generic_key+user", []rulekey.Part{{Kind: rulekey.Entry, Name: "generic_key"}, {Kind: rulekey.User}}, ""},
		{"global+ip", nil, `by: global is one bucket for every call and joins nothing; use "ip" without global`},
		{"user+user", nil, `names "user" twice`},
		{"client+ip", nil, `names "ip" twice`},
		{"a+b+c+d+e", nil, "at most 4 parts"},
		{"header:", nil, `"header:" needs a name after the colon, e.g. "header:x-tenant"`},
		{"header:x y", nil, `a header name is letters`},
		{"entry:a b", nil, `an entry key is printable ASCII without spaces`},
		{"user+", nil, "empty part"},
		{"session", nil, `got "session"`},
	}
	for _, tt := range tests {
		got, err := parseBy(tt.by)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseBy(%q) = %v, want an error containing %q", tt.by, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseBy(%q) = %+v, %v, want %+v", tt.by, got, err, tt.want)
		}
	}
}
