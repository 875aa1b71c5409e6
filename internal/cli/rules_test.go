package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/adminclient"
	"github.com/sluicehq/sluice/rules"
)

func TestFormatChange(t *testing.T) {
	tests := []struct {
		name string
		c    adminclient.Change
		want string
	}{
		{"create rule", adminclient.Change{Op: "create", Kind: "rule", ID: "free-per-user",
			After: json.RawMessage(`{"id":"free-per-user","match":{"plan":"free"},"limit":100,"window":"1m","algorithm":"token_bucket"}`)},
			"+ rule free-per-user"},
		{"delete rule", adminclient.Change{Op: "delete", Kind: "rule", ID: "y", Before: json.RawMessage(`{"id":"y","limit":1,"window":"1s"}`)},
			"- rule y"},
		{"update one field", adminclient.Change{Op: "update", Kind: "rule", ID: "x",
			Before: json.RawMessage(`{"id":"x","match":{},"limit":100,"window":"1m","algorithm":"token_bucket"}`),
			After:  json.RawMessage(`{"id":"x","match":{},"limit":200,"window":"1m","algorithm":"token_bucket"}`)},
			"~ rule x: limit 100 → 200"},
		{"update fields in file order, defaults spelled out", adminclient.Change{Op: "update", Kind: "rule", ID: "x",
			Before: json.RawMessage(`{"id":"x","match":{"plan":"free"},"limit":100,"window":"1m","algorithm":"token_bucket"}`),
			After: json.RawMessage(`{"id":"x","description":"Per caller, 1 a second","match":{"plan":"free","endpoint":"GET /api/*"},"by":"ip",` +
				`"limit":100,"window":"1h","burst":50,"algorithm":"leaky_bucket","failure_mode":"closed","shadow":true,"enabled":false}`)},
			`~ rule x: description "" → "Per caller, 1 a second", match.endpoint * → "GET /api/*", by client → ip, window 1m → 1h, ` +
				`burst default → 50, algorithm token_bucket → leaky_bucket, failure_mode open → closed, shadow false → true, enabled true → false`},
		{"a default spelled out is no change", adminclient.Change{Op: "update", Kind: "rule", ID: "x",
			Before: json.RawMessage(`{"id":"x","limit":1,"window":"1s","by":"client","enabled":true}`),
			After:  json.RawMessage(`{"id":"x","limit":2,"window":"1s"}`)},
			"~ rule x: limit 1 → 2"},
		{"a field removed", adminclient.Change{Op: "update", Kind: "rule", ID: "x",
			Before: json.RawMessage(`{"id":"x","match":{"plan":"free"},"limit":1,"window":"1s"}`),
			After:  json.RawMessage(`{"id":"x","match":{},"limit":1,"window":"1s"}`)},
			"~ rule x: match.plan free → *"},
		{"an unknown field", adminclient.Change{Op: "update", Kind: "rule", ID: "x",
			Before: json.RawMessage(`{"id":"x","limit":1,"window":"1s"}`),
			After:  json.RawMessage(`{"id":"x","limit":1,"window":"1s","priority":3}`)},
			"~ rule x: priority (none) → 3"},
		{"update without visible field changes", adminclient.Change{Op: "update", Kind: "rule", ID: "x"},
			"~ rule x"},
		{"create client", adminclient.Change{Op: "create", Kind: "client", ID: "user:alice", After: json.RawMessage(`{"plan":"pro"}`)},
			"+ client user:alice (plan pro)"},
		{"update client", adminclient.Change{Op: "update", Kind: "client", ID: "ip:2001:db8::/64",
			Before: json.RawMessage(`{"plan":"free"}`), After: json.RawMessage(`{"plan":"partner"}`)},
			"~ client ip:2001:db8::/64: plan free → partner"},
		{"delete client", adminclient.Change{Op: "delete", Kind: "client", ID: "user:bob", Before: json.RawMessage(`{"plan":"pro"}`)},
			"- client user:bob"},
		{"default plan", adminclient.Change{Op: "update", Kind: "default_plan", Before: json.RawMessage(`"free"`), After: json.RawMessage(`"basic"`)},
			"~ default_plan: free → basic"},
		{"default plan cleared", adminclient.Change{Op: "update", Kind: "default_plan", Before: json.RawMessage(`"free"`), After: json.RawMessage(`""`)},
			"~ default_plan: free → (none)"},
		{"unknown op", adminclient.Change{Op: "rename", Kind: "rule", ID: "x"}, "? rule x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatChange(tt.c); got != tt.want {
				t.Errorf("formatChange() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestWriteApplyResult(t *testing.T) {
	changes := []adminclient.Change{
		{Op: "create", Kind: "rule", ID: "a"},
		{Op: "update", Kind: "rule", ID: "b", Before: json.RawMessage(`{"limit":1}`), After: json.RawMessage(`{"limit":2}`)},
		{Op: "delete", Kind: "rule", ID: "c"},
		{Op: "delete", Kind: "client", ID: "user:d"},
	}
	tests := []struct {
		name   string
		res    adminclient.ApplyResult
		dryRun bool
		want   string
	}{
		{"applied", adminclient.ApplyResult{Revision: 8, Changes: changes}, false,
			"+ rule a\n~ rule b: limit 1 → 2\n- rule c\n- client user:d\napplied: 1 created, 1 updated, 2 deleted; revision 8\n"},
		{"dry run", adminclient.ApplyResult{Revision: 7, DryRun: true, Changes: changes[:2]}, true,
			"+ rule a\n~ rule b: limit 1 → 2\ndry run: 1 to create, 1 to update, 0 to delete; nothing applied (revision 7)\n"},
		{"nothing to do", adminclient.ApplyResult{Revision: 7}, false,
			"no changes: the rules in force already match (revision 7)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := writeApplyResult(&b, &tt.res, tt.dryRun); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("writeApplyResult() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestRulesCommands runs `sluice rules` against a real admin API, step by
// step.
func TestRulesCommands(t *testing.T) {
	s := startSluice(t, "")
	v1 := s.file(t, "v1.yaml", `default_plan: free
rules:
  - id: free-per-user
    match: {plan: free}
    limit: 100
    window: 1m
  - id: login
    match: {endpoint: "POST /login"}
    by: ip
    limit: 5
    window: 1m
    algorithm: sliding_log
    failure_mode: closed
    shadow: true
clients:
  "user:alice": {plan: pro}
`)
	v2 := s.file(t, "v2.yaml", `default_plan: basic
rules:
  - id: free-per-user
    match: {plan: free}
    limit: 200
    window: 1h
    enabled: false
`)
	bad := s.file(t, "bad.yaml", "rules:\n  - id: x\n    limit: -1\n    window: 1m\n")
	admin := "--admin=" + s.admin

	steps := []struct {
		name      string
		args      []string
		stdin     string
		wantCode  int
		wantOut   string // exact, unless wantOutHas
		wantOutIn []string
		wantErr   string // substring of stderr
	}{
		{name: "dry run", args: []string{"rules", "apply", "-f", v1, "--dry-run", admin},
			wantOut: "+ rule free-per-user\n+ rule login\n+ client user:alice (plan pro)\n" +
				"dry run: 3 to create, 0 to update, 0 to delete; nothing applied (revision 0)\n"},
		{name: "nothing applied by the dry run", args: []string{"rules", "list", admin},
			wantOut: "\nno rules, revision 0, default plan free\n"},
		{name: "apply", args: []string{"rules", "apply", "-f", v1, admin},
			wantOut: "+ rule free-per-user\n+ rule login\n+ client user:alice (plan pro)\n" +
				"applied: 3 created, 0 updated, 0 deleted; revision 1\n"},
		{name: "apply again changes nothing", args: []string{"rules", "apply", "-f", v1, admin},
			wantOut: "no changes: the rules in force already match (revision 1)\n"},
		{name: "list", args: []string{"rules", "list", admin}, wantOut: "" +
			"ID             PLAN  ENDPOINT     BY      LIMIT  WINDOW  ALGORITHM     MODE    FLAGS\n" +
			"free-per-user  free  *            client  100    1m      token_bucket  open    -\n" +
			"login          *     POST /login  ip      5      1m      sliding_log   closed  shadow\n" +
			"\n2 rules, revision 1, default plan free\n"},
		{name: "list as yaml", args: []string{"rules", "list", "-o", "yaml", admin},
			wantOutIn: []string{"revision: 1\n", "default_plan: free\n", "  - id: login\n", "    algorithm: sliding_log\n"}},
		{name: "list as json", args: []string{"rules", "list", "--output=json", admin},
			wantOutIn: []string{`"revision": 1`, `"id": "free-per-user"`, `"window": "1m"`}},
		{name: "get", args: []string{"rules", "get", "login", admin}, wantOut: "" +
			"id: login\nmatch:\n  endpoint: POST /login\nby: ip\nlimit: 5\nwindow: 1m\n" +
			"algorithm: sliding_log\nfailure_mode: closed\nshadow: true\n"},
		{name: "get unknown", args: []string{"rules", "get", "nope", admin},
			wantCode: 1, wantErr: `sluice: rule "nope" does not exist (HTTP 404 not_found)`},
		{name: "apply with updates and deletes, from stdin", args: []string{"rules", "apply", "-f", "-", admin}, stdin: mustRead(t, v2),
			wantOut: "~ rule free-per-user: limit 100 → 200, window 1m → 1h, enabled true → false\n- rule login\n" +
				"~ default_plan: free → basic\napplied: 0 created, 2 updated, 1 deleted; revision 2\n"},
		{name: "disabled shows in the table", args: []string{"rules", "list", admin},
			wantOutIn: []string{"free-per-user  free  *         client  200    1h      token_bucket  open  disabled\n", "1 rule, revision 2, default plan basic\n"}},
		{name: "an invalid file is reported with its line and nothing is sent", args: []string{"rules", "apply", "-f", bad, admin},
			wantCode: 1, wantErr: `bad.yaml: line 3: rules[0] (id "x").limit: must be ≥ 0 (0 denies every call), got -1`},
		{name: "a missing file", args: []string{"rules", "apply", "-f", s.dir + "/none.yaml", admin},
			wantCode: 1, wantErr: "no such file"},
		{name: "apply needs -f", args: []string{"rules", "apply", admin}, wantCode: 1, wantErr: "-f FILE is required"},
		// issue 27 §6: an empty document (a failed pipe) deleted every rule.
		{name: "an empty pipe is refused", args: []string{"rules", "apply", "-f", "-", admin}, stdin: "",
			wantCode: 1, wantErr: `standard input: no "rules:" list (0 bytes read), and applying it would delete every rule; nothing was sent. To delete every rule, write "rules: []" or pass --prune`},
		{name: "a file without rules is refused", args: []string{"rules", "apply", "-f", "-", admin}, stdin: "# nothing\ndefault_plan: basic\n",
			wantCode: 1, wantErr: "pass --prune"},
		{name: "the rules are still there", args: []string{"rules", "list", admin},
			wantOutIn: []string{"1 rule, revision 2, default plan basic\n"}},
		{name: "rules: [] written out deletes them (dry run)", args: []string{"rules", "apply", "-f", "-", "--dry-run", admin}, stdin: "rules: []\n",
			wantOut: "- rule free-per-user\ndry run: 0 to create, 0 to update, 1 to delete; nothing applied (revision 2)\n"},
		{name: "--prune says an empty file means no rules (dry run)", args: []string{"rules", "apply", "-f", "-", "--prune", "--dry-run", admin}, stdin: "",
			wantOut: "- rule free-per-user\ndry run: 0 to create, 0 to update, 1 to delete; nothing applied (revision 2)\n"},
		{name: "delete", args: []string{"rules", "delete", "free-per-user", admin}, wantOut: "- rule free-per-user\n"},
		{name: "delete unknown", args: []string{"rules", "delete", "free-per-user", admin},
			wantCode: 1, wantErr: `rule "free-per-user" does not exist (HTTP 404 not_found)`},
		{name: "get wants an id", args: []string{"rules", "get", admin}, wantCode: 1, wantErr: "want one rule id, got 0 arguments"},
		{name: "bad output", args: []string{"rules", "list", "-o", "xml", admin}, wantCode: 1, wantErr: `--output "xml": want table, json, yaml`},
		{name: "admin without scheme", args: []string{"rules", "list", "--admin", strings.TrimPrefix(s.admin, "http://")},
			wantOut: "\nno rules, revision 3, default plan basic\n"},
		{name: "no server", args: []string{"rules", "list", "--admin", "http://127.0.0.1:1"}, wantCode: 1, wantErr: "connection refused"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			code, out, errOut := sluice(t, st.stdin, st.args...)
			if code != st.wantCode {
				t.Fatalf("sluice %s: exit %d, want %d; stderr:\n%s", strings.Join(st.args, " "), code, st.wantCode, errOut)
			}
			if st.wantOutIn == nil && out != st.wantOut {
				t.Errorf("stdout =\n%s\nwant\n%s", out, st.wantOut)
			}
			for _, w := range st.wantOutIn {
				if !strings.Contains(out, w) {
					t.Errorf("stdout =\n%s\nwant it to contain %q", out, w)
				}
			}
			if !strings.Contains(errOut, st.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", errOut, st.wantErr)
			}
		})
	}
}

func TestRulesToken(t *testing.T) {
	s := startSluice(t, "s3cret")
	code, _, errOut := sluice(t, "", "rules", "list", "--admin", s.admin)
	if code != 1 || !strings.Contains(errOut, "HTTP 401 unauthorized") {
		t.Errorf("without a token: exit %d, stderr %q; want 1 and HTTP 401 unauthorized", code, errOut)
	}
	t.Setenv("SLUICE_ADMIN_TOKEN", "s3cret")
	t.Setenv("SLUICE_ADMIN", s.admin)
	code, out, errOut := sluice(t, "", "rules", "list")
	if code != 0 || !strings.Contains(out, "no rules, revision 0") {
		t.Errorf("with SLUICE_ADMIN_TOKEN and SLUICE_ADMIN: exit %d, stdout %q, stderr %q; want the empty list", code, out, errOut)
	}
	code, _, errOut = sluice(t, "", "rules", "list", "--admin-token", "wrong")
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("--admin-token wrong over the environment: exit %d, stderr %q; want 401", code, errOut)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRuleTableUnlimited: an unlimited rule lists as unlimited, with no
// window or algorithm; replaces shows among the flags.
func TestRuleTableUnlimited(t *testing.T) {
	var b strings.Builder
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "free", Unlimited: true, Match: rules.Match{Endpoint: "GET /health"}, Replaces: []string{"a", "b"}},
		{ID: "blocked", Limit: 0, Window: rules.Duration(time.Minute), By: rules.ByIP},
	}}
	if err := writeRuleTable(&b, set); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"ID       PLAN  ENDPOINT     BY      LIMIT      WINDOW  ALGORITHM     MODE  FLAGS\n" +
		"free     *     GET /health  client  unlimited  -       -             open  replaces=a|b\n" +
		"blocked  *     *            ip      0          1m      token_bucket  open  -\n" +
		"\n2 rules, revision 0, default plan (none)\n"
	if b.String() != want {
		t.Errorf("writeRuleTable =\n%s\nwant\n%s", b.String(), want)
	}
}
