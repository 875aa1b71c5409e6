package rulestore

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

func envoyConf(domain string, rpu int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: " +
		itoa(rpu) + "\n"
}

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syncLog is a log buffer safe for concurrent writes.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// limits returns the limit of each rule in force, by domain.
func limits(ix *rules.Index) map[string]int64 {
	m := make(map[string]int64)
	for _, r := range ix.Rules() {
		m[r.Match.Domain] = r.Limit
	}
	return m
}

func openDir(t *testing.T, cfg EnvoyDirConfig) (*EnvoyDir, *syncLog) {
	t.Helper()
	var log syncLog
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	d, err := OpenEnvoyDir(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, &log
}

// TestEnvoyDirFollowsChanges: every file of the runtime directory loads;
// an edit, a new file and a removed one are in force after a poll, and a
// change that does not load keeps the last good rules, logged at WARN once
// and in Status, until fixed.
func TestEnvoyDirFollowsChanges(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	writeFile(t, filepath.Join(conf, "a.yaml"), envoyConf("a", 1))
	writeFile(t, filepath.Join(conf, "sub", "b.conf"), envoyConf("b", 2)) // any name, any depth
	writeFile(t, filepath.Join(root, "ratelimit", "config.yaml"), envoyConf("c", 3))
	writeFile(t, filepath.Join(root, "ratelimit", "other.yaml"), "not: loaded\n")
	d, log := openDir(t, EnvoyDirConfig{Root: root, Subdirectory: "ratelimit"})
	var got []int64
	d.Subscribe(func(ix *rules.Index) { got = append(got, ix.Revision()) })
	if l := limits(d.Current()); len(l) != 3 || l["a"] != 1 || l["b"] != 2 || l["c"] != 3 {
		t.Fatalf("limits at start = %v, want a 1, b 2, c 3", l)
	}

	writeFile(t, filepath.Join(conf, "a.yaml"), envoyConf("a", 10))
	os.Remove(filepath.Join(conf, "sub", "b.conf"))
	writeFile(t, filepath.Join(conf, "d.yaml"), envoyConf("d", 4))
	if err := d.Poll(); err != nil {
		t.Fatal(err)
	}
	if l := limits(d.Current()); len(l) != 3 || l["a"] != 10 || l["d"] != 4 || d.Current().Revision() != 2 {
		t.Fatalf("limits after the change = %v (revision %d), want a 10, c 3, d 4 at 2", l, d.Current().Revision())
	}

	// A broken change: the last good rules stay.
	writeFile(t, filepath.Join(conf, "d.yaml"), envoyConf("a", 5)) // a second file of domain a
	err := d.Poll()
	if err == nil || !strings.Contains(err.Error(), `domain "a" is also the domain of config/a.yaml`) {
		t.Fatalf("Poll of a broken change = %v, want the duplicate domain", err)
	}
	if err2 := d.Poll(); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second Poll = %v, want the same problem", err2)
	}
	if l := limits(d.Current()); l["a"] != 10 || l["d"] != 4 {
		t.Errorf("limits after a broken change = %v, want the last good", l)
	}
	if st := d.Status(); st.Error == "" || st.ErrorAt.IsZero() || st.Revision != 2 {
		t.Errorf("Status = %+v, want the error at revision 2", st)
	}
	if n := strings.Count(log.String(), "level=WARN"); n != 1 {
		t.Errorf("%d WARN lines, want 1:\n%s", n, log)
	}
	// Fixed: in force, the problem cleared.
	writeFile(t, filepath.Join(conf, "d.yaml"), envoyConf("d", 6))
	if err := d.Poll(); err != nil {
		t.Fatal(err)
	}
	if l := limits(d.Current()); l["d"] != 6 || d.Status().Error != "" || d.Current().Revision() != 3 {
		t.Errorf("after the fix: limits %v, status %+v", l, d.Status())
	}
	if len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Errorf("subscriber saw revisions %v, want [2 3]", got)
	}
	// A directory that vanishes keeps the rules too.
	os.RemoveAll(filepath.Join(root, "ratelimit"))
	if err := d.Poll(); err == nil || limits(d.Current())["d"] != 6 {
		t.Errorf("Poll of a removed directory = %v, limits %v: want an error and the last good", err, limits(d.Current()))
	}
	if _, err := d.Update(t.Context(), -1, func(*rules.Set) error { return nil }); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Update = %v, want ErrUnavailable", err)
	}
}

// configMap lays out dir as the kubelet mounts a ConfigMap: the files in a
// timestamped directory, ..data a symlink to it, and each file a symlink
// through ..data. Later calls swap ..data atomically (a symlink renamed
// over it) and remove the old directory, as the kubelet does.
func configMap(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_12_07_"+stamp)
	for name, data := range files {
		writeFile(t, filepath.Join(ts, name), data)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		os.RemoveAll(filepath.Join(dir, old))
	}
}

// TestEnvoyDirConfigMap: a ConfigMap update — ..data swapped — is in
// force after a poll, with RUNTIME_IGNOREDOTFILES as deployments set it;
// without it the mount's own copies load too, refused with the fix named.
func TestEnvoyDirConfigMap(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	configMap(t, conf, "01", map[string]string{"rl.yaml": envoyConf("gw", 1), "rl2.yaml": envoyConf("gw2", 2)})
	d, _ := openDir(t, EnvoyDirConfig{Root: root, Subdirectory: "ratelimit", IgnoreDotFiles: true})
	if l := limits(d.Current()); len(l) != 2 || l["gw"] != 1 {
		t.Fatalf("limits = %v, want gw 1, gw2 2", l)
	}
	configMap(t, conf, "02", map[string]string{"rl.yaml": envoyConf("gw", 7), "rl2.yaml": envoyConf("gw2", 8)})
	if err := d.Poll(); err != nil {
		t.Fatal(err)
	}
	if l := limits(d.Current()); l["gw"] != 7 || l["gw2"] != 8 {
		t.Fatalf("limits after the ConfigMap update = %v, want gw 7, gw2 8", l)
	}
	// A broken update keeps the last good.
	configMap(t, conf, "03", map[string]string{"rl.yaml": "domain: gw\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n", "rl2.yaml": envoyConf("gw2", 9)})
	if err := d.Poll(); err == nil || !strings.Contains(err.Error(), `config/rl.yaml: line 4: k: rate_limit.unit: want one of`) {
		t.Fatalf("Poll of a broken update = %v", err)
	}
	if l := limits(d.Current()); l["gw"] != 7 || l["gw2"] != 8 {
		t.Fatalf("limits after a broken update = %v, want the last good", l)
	}

	_, err := OpenEnvoyDir(EnvoyDirConfig{Root: root, Subdirectory: "ratelimit"})
	if err == nil || !strings.Contains(err.Error(), "set RUNTIME_IGNOREDOTFILES=true") {
		t.Errorf("OpenEnvoyDir of a ConfigMap without IgnoreDotFiles = %v, want the fix named", err)
	}
}

// TestEnvoyDirLayout: RUNTIME_WATCH_ROOT=false reads the application
// directory alone; an empty or missing setting is refused with its name;
// an empty file is refused as envoyproxy/ratelimit refuses it.
func TestEnvoyDirLayout(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "rl", "limits", "a.yaml"), envoyConf("a", 1))
	writeFile(t, filepath.Join(root, "rl", "limits.yaml"), envoyConf("b", 1))
	d, _ := openDir(t, EnvoyDirConfig{Root: root, Subdirectory: "rl", AppDirectory: "limits", AppDirectoryOnly: true})
	if l := limits(d.Current()); len(l) != 1 || l["a"] != 1 {
		t.Errorf("limits = %v, want a alone", l)
	}
	for _, tt := range []struct {
		cfg  EnvoyDirConfig
		want string
	}{
		{EnvoyDirConfig{Root: root}, "RUNTIME_SUBDIRECTORY is empty"},
		{EnvoyDirConfig{Root: root, Subdirectory: "nope"}, "nope/config (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY): stat"},
	} {
		if _, err := OpenEnvoyDir(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("OpenEnvoyDir(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
	writeFile(t, filepath.Join(root, "rl", "limits", "empty.yaml"), "")
	if _, err := OpenEnvoyDir(EnvoyDirConfig{Root: root, Subdirectory: "rl", AppDirectory: "limits"}); err == nil ||
		!strings.Contains(err.Error(), "limits/empty.yaml: the file is empty") {
		t.Errorf("OpenEnvoyDir with an empty file = %v", err)
	}
}
