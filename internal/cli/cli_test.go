package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
)

// testSluice is a sluice wired as `sluice serve` wires it (file rules
// store, admin API, in-memory limiter, data plane) on loopback test
// servers.
type testSluice struct {
	admin, data string
	dir         string
}

func startSluice(t *testing.T, token string) *testSluice {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := rulestore.OpenFile(rulestore.FileConfig{Path: filepath.Join(dir, "rules.yaml"), Logger: log})
	if err != nil {
		t.Fatalf("rulestore.OpenFile: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	lim := limiter.New(limitertest.Store(t, memory.DefaultConfig()), limiter.Config{})
	lim.SetRules(src.Current())
	src.Subscribe(lim.SetRules)
	data := httptest.NewServer(server.New(lim, server.Config{Logger: log}))
	t.Cleanup(data.Close)
	adm := httptest.NewServer(admin.New(src, admin.Config{Token: token, Logger: log}))
	t.Cleanup(adm.Close)
	return &testSluice{admin: adm.URL, data: data.URL, dir: dir}
}

// sluice runs the sluice command and returns its exit code, stdout and
// stderr.
func sluice(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	root := NewRoot()
	var out, errOut strings.Builder
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	code := run(context.Background(), root, args, &errOut)
	return code, out.String(), errOut.String()
}

func (s *testSluice) file(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(s.dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	code, out, errOut := sluice(t, "", "version")
	if code != 0 {
		t.Fatalf("version: exit %d: %s", code, errOut)
	}
	// --version, as most commands take it, prints the same.
	code, flagOut, errOut := sluice(t, "", "--version")
	if code != 0 || flagOut != out {
		t.Errorf("--version: exit %d, printed\n%s%s\nwant what `sluice version` prints:\n%s", code, flagOut, errOut, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "sluice ") || !strings.HasPrefix(lines[1], "commit ") ||
		!strings.Contains(lines[2], runtime.Version()) {
		t.Errorf("version printed\n%s\nwant sluice <version>, commit <commit>, go %s", out, runtime.Version())
	}

	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3", "abc123"
	if b := readBuildInfo(); b.Version != "v1.2.3" || b.Commit != "abc123" {
		t.Errorf("readBuildInfo() = %+v, want the stamped v1.2.3 and abc123", b)
	}
}

func TestCommandLine(t *testing.T) {
	for _, c := range []struct{ argv, want []string }{
		{[]string{"/usr/local/bin/sluice", "serve", "--listen", ":1"}, []string{"serve", "--listen", ":1"}},
		{[]string{"sluice"}, []string{}},
		{[]string{"/bin/ratelimit"}, []string{"serve"}},
		{[]string{"ratelimit", "--grpc-listen", ":8081"}, []string{"serve", "--grpc-listen", ":8081"}},
		{[]string{"/opt/ratelimit-tools/sluice", "version"}, []string{"version"}},
	} {
		if got := commandLine(c.argv); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("commandLine(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}
