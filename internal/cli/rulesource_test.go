package cli

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

func TestOpenRules(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	file := filepath.Join(t.TempDir(), "rules.yaml")
	db := pgtest.NewDatabase(t)
	for _, tc := range []struct {
		name     string
		rules    string
		flags    rulesStoreFlags
		wantKind string // "" = an error containing wantErr
		wantErr  string
	}{
		{"file", file, rulesStoreFlags{refresh: 5 * time.Second, notify: true}, "file", ""},
		{"file with snapshot", file, rulesStoreFlags{snapshot: "s.yaml", refresh: 5 * time.Second}, "", "--rules-snapshot is for a rules database"},
		{"postgres", db, rulesStoreFlags{refresh: 5 * time.Second, notify: true}, "postgres", ""},
		{"postgresql scheme", strings.Replace(db, "postgres://", "postgresql://", 1), rulesStoreFlags{refresh: time.Second}, "postgres", ""},
		{"postgres bad refresh", db, rulesStoreFlags{refresh: 0}, "", "--rules-refresh must be > 0"},
		// Issue 18: a snapshot that can never be written is refused at
		// start, not a WARN on every change while the safety net is absent.
		{"postgres snapshot in a missing directory", db, rulesStoreFlags{snapshot: filepath.Join(t.TempDir(), "no", "such", "s.yaml"), refresh: time.Second}, "", "--rules-snapshot"},
		{"postgres snapshot in a file, not a directory", db, rulesStoreFlags{snapshot: filepath.Join(file, "s.yaml"), refresh: time.Second}, "", "--rules-snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := openRules(context.Background(), tc.rules, time.Second, tc.flags, log)
			if tc.wantKind == "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("openRules = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if got := src.Status().Kind; got != tc.wantKind {
				t.Errorf("Status().Kind = %q, want %q", got, tc.wantKind)
			}
		})
	}
}
