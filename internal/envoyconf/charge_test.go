package envoyconf

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

func TestParseSelector(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Selector
		err  string
	}{
		{in: "ai", want: Selector{Domain: "ai"}},
		{in: "default/eg/https", want: Selector{Domain: "default/eg/https"}},
		{in: "ai:user", want: Selector{Domain: "ai", Key: "user"}},
		{in: "ai:user=alice", want: Selector{Domain: "ai", Key: "user", Value: "alice", HasValue: true}},
		{in: "ai:user=", want: Selector{Domain: "ai", Key: "user", HasValue: true}},
		{in: "a:b:path=/x:y", want: Selector{Domain: "a:b", Key: "path", Value: "/x:y", HasValue: true}},
		{in: "", err: `"": want domain, domain:key or domain:key=value, with a non-empty domain`},
		{in: ":user", err: "with a non-empty domain"},
		{in: "ai:", err: "with a key after the ':'"},
		{in: "ai=x", err: "a value needs a key (domain:key=value)"},
	} {
		got, err := ParseSelector(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSelector(%q) = %+v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSelector(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("ParseSelector(%q).String() = %q", tt.in, got.String())
		}
	}
}

// TestLoadChargeAfterResponse: the rules of the descriptors a selector
// names — a descriptor, or one under it — get charge: after_response;
// unlimited ones and the rest do not; a selector that names no
// descriptor with a rate_limit is a note.
func TestLoadChargeAfterResponse(t *testing.T) {
	conf := []byte(`domain: ai
descriptors:
  - key: model
    value: large
    rate_limit: {unit: hour, requests_per_unit: 100}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: model
    value: small
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: model
    value: free
    rate_limit: {unlimited: true}
`)
	for _, tt := range []struct {
		sels    []string
		charged string // the ids of the rules with charge, in order
		note    string
	}{
		{nil, "", ""},
		{[]string{"ai"}, "ai.1 ai.2 ai.3", ""},
		{[]string{"ai:user"}, "ai.2", ""},
		{[]string{"ai:model=large"}, "ai.1 ai.2", ""},
		{[]string{"ai:model=small", "ai:model=free"}, "ai.3", `charge after response: "ai:model=free" selects no descriptor with a rate_limit`},
		{[]string{"other"}, "", `"other" selects no descriptor`},
	} {
		sels, err := ParseSelectors(tt.sels)
		if err != nil {
			t.Fatal(err)
		}
		s, notes, err := Load([]File{{Name: "ai.yaml", Data: conf}}, Options{ChargeAfterResponse: sels})
		if err != nil {
			t.Fatal(err)
		}
		var charged []string
		for _, r := range s.Rules {
			if r.Charge == rules.ChargeAfterResponse {
				charged = append(charged, r.ID)
			}
		}
		if got := strings.Join(charged, " "); got != tt.charged {
			t.Errorf("%v: charged %q, want %q", tt.sels, got, tt.charged)
		}
		if got := strings.Join(notes, "\n"); tt.note == "" && got != "" || !strings.Contains(got, tt.note) {
			t.Errorf("%v: notes %q, want %q", tt.sels, got, tt.note)
		}
		if _, err := rules.Compile(s); err != nil {
			t.Fatal(err)
		}
	}
}
