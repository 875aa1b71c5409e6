package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/rulestore"
)

// rulesStoreFlags are the flags of the PostgreSQL rules store; --rules and
// --rules-poll are registered with the other serve flags.
type rulesStoreFlags struct {
	snapshot string
	refresh  time.Duration
	notify   bool
}

// addRulesStoreFlags registers the PostgreSQL rules store's flags on fl.
func addRulesStoreFlags(fl *pflag.FlagSet, f *rulesStoreFlags) {
	fl.StringVar(&f.snapshot, "rules-snapshot", "", "with --rules postgres://...: file the rules in force are saved to on every change, with the database's identity: served at start while the database is unreachable, and instead of a replaced database's rules (see sluice rules restore)")
	fl.DurationVar(&f.refresh, "rules-refresh", 5*time.Second, "with --rules postgres://...: how often the database's revision is checked (the safety net under notifications)")
	fl.BoolVar(&f.notify, "rules-notify", true, "with --rules postgres://...: LISTEN for changes, in force within about a second (false: only --rules-refresh)")
}

// openRules opens the rules store --rules names: a PostgreSQL database
// for a postgres:// or postgresql:// URL, else the YAML rules file.
func openRules(ctx context.Context, rulesArg string, poll time.Duration, f rulesStoreFlags, log *slog.Logger) (rulestore.Source, error) {
	if !rulestore.IsPostgresURL(rulesArg) {
		if f.snapshot != "" {
			return nil, errors.New("serve: --rules-snapshot is for a rules database (--rules postgres://...); a rules file is its own snapshot")
		}
		src, err := rulestore.OpenFile(rulestore.FileConfig{Path: rulesArg, PollInterval: poll, Logger: log})
		if err != nil {
			return nil, err
		}
		return src, nil
	}
	if f.refresh <= 0 {
		return nil, errors.New("serve: --rules-refresh must be > 0, e.g. 5s")
	}
	if f.snapshot != "" {
		if err := checkSnapshotDir(f.snapshot); err != nil {
			return nil, err
		}
	}
	src, err := rulestore.OpenPostgres(ctx, rulestore.PostgresConfig{
		URL:             rulesArg,
		RefreshInterval: f.refresh,
		NoNotify:        !f.notify,
		SnapshotPath:    f.snapshot,
		Logger:          log,
	})
	if err != nil {
		return nil, err
	}
	return src, nil
}

// checkSnapshotDir refuses a --rules-snapshot that can never be written —
// its directory missing, not a directory, or not writable — so that the
// safety net is not silently absent.
func checkSnapshotDir(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("serve: --rules-snapshot %s: its directory %s: %w; create it (mkdir -p %s) or give another path", path, dir, err, dir)
	case !fi.IsDir():
		return fmt.Errorf("serve: --rules-snapshot %s: %s is not a directory; give a path in a directory", path, dir)
	}
	probe, err := os.CreateTemp(dir, ".sluice-snapshot-check-*")
	if err != nil {
		return fmt.Errorf("serve: --rules-snapshot %s: sluice cannot write in %s: %w; give it write access or another path", path, dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}
