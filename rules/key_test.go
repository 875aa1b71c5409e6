package rules

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseBy(t *testing.T) {
	tests := []struct {
		by      By
		want    []KeyPart
		wantErr string
	}{
		{"", []KeyPart{{Kind: KeyClient}}, ""},
		{"global", []KeyPart{{Kind: KeyGlobal}}, ""},
		{"endpoint", []KeyPart{{Kind: KeyEndpoint}}, ""},
		{"api_key+endpoint", []KeyPart{{Kind: KeyAPIKey}, {Kind: KeyEndpoint}}, ""},
		{"header:x-tenant", []KeyPart{{Kind: KeyHeader, Name: "X-Tenant"}}, ""},
		{"entry:generic_key+user", []KeyPart{{Kind: KeyEntry, Name: "generic_key"}, {Kind: KeyUser}}, ""},
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
		got, err := ParseBy(tt.by)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseBy(%q) = %v, want an error containing %q", tt.by, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseBy(%q) = %+v, %v, want %+v", tt.by, got, err, tt.want)
		}
	}
}
