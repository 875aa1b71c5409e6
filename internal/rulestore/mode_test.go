package rulestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

func addKey(key string) func(*rules.Set) error {
	return func(s *rules.Set) error {
		if s.Clients == nil {
			s.Clients = map[string]rules.Client{}
		}
		s.Clients["api_key:"+key] = rules.Client{Plan: "partner"}
		return nil
	}
}

// TestRulesFileModeWithKeys: the rules file holds registered API keys in
// clear, so once it holds one it is written 0600 (a mode an operator made
// stricter stays); without keys its mode is kept (issue 27 §7: it was
// created 0644 with keys in it).
func TestRulesFileModeWithKeys(t *testing.T) {
	mode := func(t *testing.T, path string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	ctx := context.Background()

	fx := newFixture(t)
	f := fx.open(t)
	if m := mode(t, fx.path); m != 0o644 {
		t.Errorf("new rules file without keys: mode %04o, want 0644", m)
	}
	if _, err := f.Update(ctx, -1, addRule(rule("a", 1))); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, fx.path); m != 0o644 {
		t.Errorf("rules file without keys after a write: mode %04o, want 0644", m)
	}
	if _, err := f.Update(ctx, -1, addKey("k_live_42")); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, fx.path); m != 0o600 {
		t.Errorf("rules file holding a key: mode %04o, want 0600", m)
	}

	// An operator's mode: a looser one loses group and other bits once keys
	// are in, a stricter one stays.
	for _, tc := range []struct{ set, want os.FileMode }{{0o640, 0o600}, {0o604, 0o600}, {0o600, 0o600}, {0o200, 0o200}} {
		if err := os.Chmod(fx.path, tc.set); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Update(ctx, -1, addKey("k_"+tc.set.String())); err != nil {
			t.Fatal(err)
		}
		if m := mode(t, fx.path); m != tc.want {
			t.Errorf("operator's mode %04o, then a write with keys: %04o, want %04o", tc.set, m, tc.want)
		}
	}

	// A PostgreSQL snapshot of rules with keys: the same.
	snap := filepath.Join(t.TempDir(), "snapshot.yaml")
	p := &Postgres{snapshot: snap}
	if err := p.writeSnapshot(&rules.Set{Clients: map[string]rules.Client{"api_key:k": {Plan: "x"}}}, "db"); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, snap); m != 0o600 {
		t.Errorf("snapshot holding a key: mode %04o, want 0600", m)
	}
}

// TestRulesFileInConfigMap: a rules file mounted from a Kubernetes
// ConfigMap is a link through "..data" into a timestamped directory that
// the kubelet swaps on every update. Admin writes answer ErrUnavailable
// (503) naming the mount and the fix, dry runs too, and nothing in the
// volume changes — even where the directory is writable (as root).
func TestRulesFileInConfigMap(t *testing.T) {
	vol := t.TempDir()
	ts := filepath.Join(vol, "..2026_12_07_01_00_00.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	const content = "rules:\n  - {id: a, limit: 1, window: 1m}\n"
	if err := os.WriteFile(filepath.Join(ts, "rules.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(vol, "rules.yaml")
	if err := os.Symlink("..data/rules.yaml", path); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t)
	fx.cfg.Path = path
	f := fx.open(t)
	if ids := ruleIDs(f.Current()); len(ids) != 1 {
		t.Fatalf("rules from the ConfigMap = %v, want [a]", ids)
	}
	list := func() []string {
		var names []string
		filepath.WalkDir(vol, func(p string, d os.DirEntry, err error) error {
			names = append(names, p)
			return nil
		})
		return names
	}
	before := strings.Join(list(), "\n")
	for _, ctx := range []context.Context{context.Background(), WithDryRun(context.Background())} {
		_, err := f.Update(ctx, -1, addRule(rule("b", 1)))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "Kubernetes") || !strings.Contains(err.Error(), "kubectl apply") {
			t.Errorf("Update of a ConfigMap rules file = %v, want ErrUnavailable naming the mount and the fix", err)
		}
	}
	if after := strings.Join(list(), "\n"); after != before {
		t.Errorf("the volume changed:\n%s\nwant\n%s", after, before)
	}
	if b, _ := os.ReadFile(path); string(b) != content {
		t.Errorf("the ConfigMap's file = %q, want it untouched", b)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("rules.yaml is no longer the kubelet's link (err %v)", err)
	}
}
