package sluice_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

func writeRules(t *testing.T, path string, limit int) {
	t.Helper()
	// Through a rename, as editors save: the file is never seen half
	// written.
	tmp := path + ".tmp"
	data := "rules:\n  - id: per-user\n    by: user\n    limit: " + strconv.Itoa(limit) + "\n    window: 1h\n"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReload: an edit saved to the rules file is in force after the poll
// interval, for calls through Check.
func TestReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		writeRules(t, path, 1)
		lim, err := sluice.New(t.Context(), sluice.Options{RulesFile: path, PollInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer lim.Close()
		ctx := context.Background()
		d, err := lim.Check(ctx, &sluice.Request{User: "alice"})
		if err != nil || !d.Allowed || d.Limit != 1 {
			t.Fatalf("Check = %+v, %v, want allowed under limit 1", d, err)
		}
		// Another size: a rewrite within the file system's clock tick
		// would otherwise look unchanged to a stat.
		writeRules(t, path, 12)
		time.Sleep(1500 * time.Millisecond) // one poll
		synctest.Wait()
		d, err = lim.Check(ctx, &sluice.Request{User: "bob"})
		if err != nil || !d.Allowed || d.Limit != 12 {
			t.Fatalf("after the edit, Check = %+v, %v, want allowed under limit 12", d, err)
		}
		if err := lim.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		if err := lim.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
	})
}

// TestNewRefuses: a rules file that is missing or does not load is an
// error that names it, and nothing is created in its place.
func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - id: x\n    limit: -1\n    window: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		o    sluice.Options
		want string
	}{
		{"empty", sluice.Options{}, "RulesFile is empty"},
		{"missing", sluice.Options{RulesFile: missing}, missing},
		{"invalid", sluice.Options{RulesFile: bad}, bad},
		{"poll", sluice.Options{RulesFile: bad, PollInterval: -1}, "PollInterval"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := sluice.New(t.Context(), tt.o)
			if err == nil {
				lim.Close()
				t.Fatalf("New(%+v) = nil error, want one containing %q", tt.o, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New(%+v) = %v, want an error containing %q", tt.o, err, tt.want)
			}
		})
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("New created %s", missing)
	}
}
