package rulestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rules"
)

// logBuf collects slog output; safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count returns how many log lines contain s.
func (l *logBuf) count(s string) int { return strings.Count(l.String(), s) }

type fixture struct {
	path string
	logs *logBuf
	tick chan time.Time
	cfg  FileConfig
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{
		path: filepath.Join(t.TempDir(), "rules.yaml"),
		logs: &logBuf{},
		tick: make(chan time.Time),
	}
	fx.cfg = FileConfig{
		Path:   fx.path,
		Logger: slog.New(slog.NewTextHandler(fx.logs, nil)),
		Now:    func() time.Time { return time.Date(2025, 5, 27, 10, 0, 0, 0, time.UTC) },
		Tick:   func(time.Duration) (<-chan time.Time, func()) { return fx.tick, func() {} },
	}
	return fx
}

func (fx *fixture) open(t *testing.T) *File {
	t.Helper()
	f, err := OpenFile(fx.cfg)
	if err != nil {
		t.Fatalf("OpenFile: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// write replaces the file as an editor would, and gives it a fresh mtime so
// that a same-size edit within the file system's timestamp granularity is
// still seen.
func (fx *fixture) write(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(fx.path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.touch(t)
}

var mtimes = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
var mtimeMu sync.Mutex

func (fx *fixture) touch(t *testing.T) {
	t.Helper()
	mtimeMu.Lock()
	mtimes = mtimes.Add(time.Second)
	m := mtimes
	mtimeMu.Unlock()
	if err := os.Chtimes(fx.path, m, m); err != nil {
		t.Fatal(err)
	}
}

func (fx *fixture) read(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rule(id string, limit int64) rules.Rule {
	return rules.Rule{ID: id, Limit: limit, Window: rules.Duration(time.Minute)}
}

func addRule(r rules.Rule) func(*rules.Set) error {
	return func(s *rules.Set) error {
		s.Rules = append(s.Rules, r)
		return nil
	}
}

// noTempFiles fails when anything but the rules file is in its directory.
func noTempFiles(t *testing.T, path string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != filepath.Base(path) {
			t.Errorf("left behind in the rules directory: %s", e.Name())
		}
	}
}

func ruleIDs(ix *rules.Index) []string {
	ids := []string{}
	for _, c := range ix.Rules() {
		ids = append(ids, c.ID)
	}
	return ids
}

func TestOpenFileCreatesExample(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)

	if got := fx.read(t); got != exampleFile {
		t.Errorf("created file =\n%s\nwant the example", got)
	}
	fi, err := os.Stat(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o644 {
		t.Errorf("mode = %v, want 0644", got)
	}
	ix := f.Current()
	if got := ix.Set().DefaultPlan; got != "free" {
		t.Errorf("DefaultPlan = %q, want free", got)
	}
	if got := len(ix.Rules()); got != 0 {
		t.Errorf("%d rules, want 0", got)
	}
	if got, want := f.Status(), (Status{Kind: "file", Location: fx.path, Loaded: fx.cfg.Now()}); got != want {
		t.Errorf("Status() = %+v, want %+v", got, want)
	}
	noTempFiles(t, fx.path)
}

// TestExampleRuleIsValid: uncommenting the example (and dropping
// "rules: []") gives a file that loads.
func TestExampleRuleIsValid(t *testing.T) {
	var b strings.Builder
	example := false
	for _, line := range strings.Split(exampleFile, "\n") {
		switch {
		case line == "# rules:":
			example = true
		case line == "rules: []":
			continue
		}
		if example && strings.HasPrefix(line, "# ") {
			line = strings.TrimPrefix(line, "# ")
		}
		b.WriteString(line + "\n")
	}
	s, err := rules.ParseYAML([]byte(b.String()))
	if err != nil {
		t.Fatalf("ParseYAML(uncommented example) error: %v\n%s", err, b.String())
	}
	if len(s.Rules) != 1 || s.Rules[0].ID != "free-per-user" || s.Rules[0].Limit != 100 {
		t.Errorf("rules = %+v, want the one example rule", s.Rules)
	}
	if got := s.Clients["api_key:k_live_42"].Plan; got != "partner" {
		t.Errorf(`clients["api_key:k_live_42"].plan = %q, want partner`, got)
	}
}

func TestOpenFileInvalid(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // in the error
	}{
		{"yaml syntax", "rules: [\n  {id: a\n", []string{"rules.yaml", "line"}},
		{"invalid rule", "rules:\n  - id: a\n    limit: -1\n    window: 1m\n", []string{"rules.yaml", "line 3", "limit"}},
		{"unknown field", "rules: []\nrevison: 3\n", []string{"rules.yaml", "line 2", "revison"}},
		{"unknown algorithm", "rules:\n  - id: a\n    limit: 5\n    window: 1m\n    algorithm: magic\n", []string{"rules.yaml", "line 5", "algorithm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t)
			fx.write(t, tt.content)
			f, err := OpenFile(fx.cfg)
			if err == nil {
				f.Close()
				t.Fatalf("OpenFile(%q) = nil error, want one", tt.content)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("OpenFile error = %q, want it to contain %q", err, w)
				}
			}
			if got := fx.read(t); got != tt.content {
				t.Errorf("file changed to %q, want it left alone", got)
			}
		})
	}
}

func TestUpdatePersists(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	if err := os.Chmod(fx.path, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, r := range []rules.Rule{rule("a", 10), rule("b", 20)} {
		ix, err := f.Update(ctx, -1, addRule(r))
		if err != nil {
			t.Fatalf("Update(add %s): %v", r.ID, err)
		}
		if got, want := ix.Revision(), int64(i+1); got != want {
			t.Errorf("Update(add %s) revision = %d, want %d", r.ID, got, want)
		}
		if f.Current() != ix {
			t.Errorf("Current() is not the index Update returned")
		}
	}
	ix, err := f.Update(ctx, -1, func(s *rules.Set) error {
		s.DefaultPlan = "pro"
		s.Clients = map[string]rules.Client{"user:alice": {Plan: "partner"}}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Status().Revision; got != 3 {
		t.Errorf("Status().Revision = %d, want 3", got)
	}
	fi, err := os.Stat(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode after Update = %v, want the file's 0600 kept", got)
	}
	if !strings.HasPrefix(fx.read(t), fileHeader) {
		t.Errorf("rewritten file does not start with the header:\n%s", fx.read(t))
	}
	noTempFiles(t, fx.path)
	f.Close()

	again := fx.open(t)
	if got, want := again.Current().Set(), ix.Set(); !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen Set = %+v, want %+v", got, want)
	}
}

func TestUpdateFailuresChangeNothing(t *testing.T) {
	fnErr := errors.New("fn failed")
	tests := []struct {
		name string
		fn   func(*rules.Set) error
		want error
	}{
		{"fn error", func(s *rules.Set) error { s.Rules = nil; return fnErr }, fnErr},
		{"invalid rule", addRule(rule("b", -1)), ErrInvalid},
		{"duplicate id", addRule(rule("a", 5)), ErrInvalid},
		{"invalid client", func(s *rules.Set) error {
			s.Clients = map[string]rules.Client{"alice": {Plan: "pro"}}
			return nil
		}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t)
			f := fx.open(t)
			before, err := f.Update(context.Background(), -1, addRule(rule("a", 10)))
			if err != nil {
				t.Fatal(err)
			}
			content := fx.read(t)
			calls := 0
			f.Subscribe(func(*rules.Index) { calls++ })

			_, err = f.Update(context.Background(), -1, tt.fn)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Update error = %v, want %v", err, tt.want)
			}
			if f.Current() != before {
				t.Errorf("Current() changed to revision %d, want revision %d kept", f.Current().Revision(), before.Revision())
			}
			if got := fx.read(t); got != content {
				t.Errorf("file changed to\n%s\nwant\n%s", got, content)
			}
			if calls != 0 {
				t.Errorf("subscriber called %d times, want 0", calls)
			}
		})
	}
}

func TestUpdateInvalidNamesField(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	_, err := f.Update(context.Background(), -1, addRule(rule("a", -5)))
	var fe *rules.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Update error = %v, want a *rules.FieldError in it", err)
	}
	if !strings.Contains(fe.Field, "limit") {
		t.Errorf("FieldError.Field = %q, want it to name limit", fe.Field)
	}
}

func TestUpdateConflict(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	ctx := context.Background()
	if _, err := f.Update(ctx, 0, addRule(rule("a", 1))); err != nil {
		t.Fatalf("Update(ifRevision 0) at revision 0: %v", err)
	}
	for _, rev := range []int64{0, 2, 100} {
		_, err := f.Update(ctx, rev, addRule(rule("b", 1)))
		if !errors.Is(err, ErrConflict) {
			t.Errorf("Update(ifRevision %d) at revision 1 error = %v, want ErrConflict", rev, err)
		}
	}
	if got := f.Current().Revision(); got != 1 {
		t.Errorf("revision = %d, want 1", got)
	}
	if _, err := f.Update(ctx, 1, addRule(rule("b", 1))); err != nil {
		t.Errorf("Update(ifRevision 1) at revision 1: %v", err)
	}
}

func TestUpdateWriteFailure(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	before, err := f.Update(context.Background(), -1, addRule(rule("a", 10)))
	if err != nil {
		t.Fatal(err)
	}
	content := fx.read(t)
	diskFull := errors.New("no space left on device")
	f.writeFile = func(string, []byte, bool) error { return diskFull }

	_, err = f.Update(context.Background(), -1, addRule(rule("b", 10)))
	if !errors.Is(err, diskFull) {
		t.Fatalf("Update error = %v, want %v", err, diskFull)
	}
	if f.Current() != before {
		t.Errorf("Current() changed to revision %d after a failed write, want %d", f.Current().Revision(), before.Revision())
	}
	if got := fx.read(t); got != content {
		t.Errorf("file changed after a failed write")
	}

	// The next write that works lands with the next revision.
	f.writeFile = writeAtomic
	ix, err := f.Update(context.Background(), -1, addRule(rule("b", 10)))
	if err != nil {
		t.Fatal(err)
	}
	if got := ix.Revision(); got != before.Revision()+1 {
		t.Errorf("revision after a failed then a good write = %d, want %d", got, before.Revision()+1)
	}
}

func TestWriteAtomicFailureLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "rules.yaml")
	// A non-empty directory where the file should be: the rename fails.
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(target, []byte("rules: []\n"), false); err == nil {
		t.Fatal("writeAtomic over a directory = nil error, want one")
	}
	noTempFiles(t, target)
}

func TestWriteAtomicFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.yaml")
	link := filepath.Join(dir, "link.yaml")
	if err := os.WriteFile(real, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(link, []byte("new"), false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.yaml is no longer a symlink (err %v)", err)
	}
	b, _ := os.ReadFile(real)
	if string(b) != "new" {
		t.Errorf("real.yaml = %q, want %q", b, "new")
	}
	if fi, _ := os.Stat(real); fi.Mode().Perm() != 0o640 {
		t.Errorf("real.yaml mode = %v, want 0640 kept", fi.Mode().Perm())
	}
}

func TestHandEdit(t *testing.T) {
	tests := []struct {
		name    string
		fileRev int64
		want    int64 // current is 2
	}{
		{"no revision", 0, 3},
		{"old revision", 1, 3},
		{"same revision", 2, 3},
		{"higher revision", 9, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t)
			f := fx.open(t)
			for _, id := range []string{"a", "b"} {
				if _, err := f.Update(context.Background(), -1, addRule(rule(id, 1))); err != nil {
					t.Fatal(err)
				}
			}
			var got []int64
			f.Subscribe(func(ix *rules.Index) { got = append(got, ix.Revision()) })

			fx.write(t, fmt.Sprintf("revision: %d\nrules:\n  - {id: c, limit: 7, window: 1h}\n", tt.fileRev))
			if err := f.Poll(); err != nil {
				t.Fatalf("Poll: %v", err)
			}
			ix := f.Current()
			if ix.Revision() != tt.want {
				t.Errorf("revision after the edit = %d, want %d", ix.Revision(), tt.want)
			}
			if ids := ruleIDs(ix); !reflect.DeepEqual(ids, []string{"c"}) {
				t.Errorf("rules after the edit = %v, want [c]", ids)
			}
			if !reflect.DeepEqual(got, []int64{tt.want}) {
				t.Errorf("subscriber saw revisions %v, want [%d]", got, tt.want)
			}
			if st := f.Status(); st.Revision != tt.want || st.Error != "" {
				t.Errorf("Status() = %+v, want revision %d and no error", st, tt.want)
			}

			// Nothing changed: no reload. A touch without a change: no reload.
			f.Poll()
			fx.touch(t)
			f.Poll()
			if len(got) != 1 || f.Current() != ix {
				t.Errorf("an unchanged file was reloaded: subscriber saw %v", got)
			}
		})
	}
}

func TestOwnWriteNotReloaded(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	ix, err := f.Update(context.Background(), -1, addRule(rule("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	f.Subscribe(func(*rules.Index) { calls++ })
	for range 3 {
		if err := f.Poll(); err != nil {
			t.Fatalf("Poll: %v", err)
		}
	}
	if calls != 0 || f.Current() != ix {
		t.Errorf("Poll after our own write: %d subscriber calls, revision %d; want 0 calls, revision %d", calls, f.Current().Revision(), ix.Revision())
	}
}

func TestBrokenHandEdit(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	good, err := f.Update(context.Background(), -1, addRule(rule("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	const warn = "rules file does not load"
	var seen []int64
	f.Subscribe(func(ix *rules.Index) { seen = append(seen, ix.Revision()) })

	broken := "rules:\n  - id: b\n    limit: -1\n    window: 1m\n"
	fx.write(t, broken)
	if err := f.Poll(); err == nil {
		t.Fatal("Poll of a broken file = nil error, want one")
	}
	st := f.Status()
	if !strings.Contains(st.Error, "line 3") || !strings.Contains(st.Error, "limit") {
		t.Errorf("Status().Error = %q, want the line and field", st.Error)
	}
	if st.ErrorAt.IsZero() {
		t.Errorf("Status().ErrorAt is zero, want the time of the error")
	}
	if f.Current() != good {
		t.Errorf("a broken edit replaced the rules in force")
	}

	// The same broken content, polled again and re-saved: logged once.
	f.Poll()
	fx.write(t, broken)
	f.Poll()
	if n := fx.logs.count(warn); n != 1 {
		t.Errorf("broken edit logged %d times, want 1:\n%s", n, fx.logs)
	}
	if !strings.Contains(fx.logs.String(), "level=WARN") {
		t.Errorf("broken edit not logged at WARN:\n%s", fx.logs)
	}

	// The API does not overwrite the operator's edit.
	if _, err := f.Update(context.Background(), -1, addRule(rule("c", 1))); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Update over a broken edit error = %v, want ErrUnavailable", err)
	}
	if got := fx.read(t); got != broken {
		t.Errorf("Update overwrote the broken edit")
	}

	// Another broken version: logged again.
	fx.write(t, "rules: [\n")
	f.Poll()
	if n := fx.logs.count(warn); n != 2 {
		t.Errorf("two distinct broken edits logged %d times, want 2", n)
	}

	// Fixed: loaded, error cleared.
	fx.write(t, "rules:\n  - id: b\n    limit: 5\n    window: 1m\n")
	if err := f.Poll(); err != nil {
		t.Fatalf("Poll of the fixed file: %v", err)
	}
	if st := f.Status(); st.Error != "" || !st.ErrorAt.IsZero() {
		t.Errorf("Status() after the fix = %+v, want no error", st)
	}
	if ids := ruleIDs(f.Current()); !reflect.DeepEqual(ids, []string{"b"}) {
		t.Errorf("rules after the fix = %v, want [b]", ids)
	}
	if want := []int64{good.Revision() + 1}; !reflect.DeepEqual(seen, want) {
		t.Errorf("subscriber saw %v, want %v", seen, want)
	}
}

func TestBrokenEditRevertedToGood(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	if _, err := f.Update(context.Background(), -1, addRule(rule("a", 1))); err != nil {
		t.Fatal(err)
	}
	good := fx.read(t)
	fx.write(t, "rules: {")
	f.Poll()
	fx.write(t, good) // undo
	if err := f.Poll(); err != nil {
		t.Fatalf("Poll after undo: %v", err)
	}
	if st := f.Status(); st.Error != "" {
		t.Errorf("Status().Error after undo = %q, want none", st.Error)
	}
	if got := f.Current().Revision(); got != 1 {
		t.Errorf("revision after undo = %d, want 1 (the content in force)", got)
	}
}

func TestUpdateBuildsOnUnpolledHandEdit(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	fx.write(t, "default_plan: free\nrules:\n  - {id: hand, limit: 1, window: 1s}\n")
	ix, err := f.Update(context.Background(), -1, addRule(rule("api", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if ids := ruleIDs(ix); !reflect.DeepEqual(ids, []string{"hand", "api"}) {
		t.Errorf("rules = %v, want [hand api]: the hand edit was lost", ids)
	}
	if got := ix.Revision(); got != 2 {
		t.Errorf("revision = %d, want 2 (edit 1, API 2)", got)
	}
}

func TestFileDeleted(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	before, err := f.Update(context.Background(), -1, addRule(rule("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(fx.path); err != nil {
		t.Fatal(err)
	}
	if err := f.Poll(); err == nil {
		t.Error("Poll of a deleted file = nil error, want one")
	}
	if f.Status().Error == "" || f.Current() != before {
		t.Errorf("after delete: Status() = %+v, revision %d; want an error and revision %d kept", f.Status(), f.Current().Revision(), before.Revision())
	}
	// An Update writes the file again, with everything.
	if _, err := f.Update(context.Background(), -1, addRule(rule("b", 1))); err != nil {
		t.Fatalf("Update after delete: %v", err)
	}
	if st := f.Status(); st.Error != "" {
		t.Errorf("Status().Error after rewrite = %q, want none", st.Error)
	}
	s, err := rules.ParseYAML([]byte(fx.read(t)))
	if err != nil || len(s.Rules) != 2 {
		t.Errorf("rewritten file: %v rules, error %v; want 2 rules", len(s.Rules), err)
	}
}

func TestConcurrentUpdates(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	const workers, each = 8, 10
	var mu sync.Mutex
	var notified []int64
	f.Subscribe(func(ix *rules.Index) {
		mu.Lock()
		notified = append(notified, ix.Revision())
		mu.Unlock()
	})
	revs := make(chan int64, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := rule(fmt.Sprintf("w%d-%d", w, i), 1)
				r.Match.Endpoint = "GET /" + r.ID // one rule per call: 80 catch-all rules would be refused
				ix, err := f.Update(context.Background(), -1, addRule(r))
				if err != nil {
					t.Error(err)
					return
				}
				revs <- ix.Revision()
				_ = f.Current().Rules()
				_ = f.Status()
			}
		}()
	}
	// Polls race with the updates and must find only our own writes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			f.Poll()
		}
	}()
	wg.Wait()
	close(revs)
	seen := map[int64]bool{}
	for r := range revs {
		if seen[r] {
			t.Errorf("revision %d returned twice", r)
		}
		seen[r] = true
	}
	if got, want := f.Current().Revision(), int64(workers*each); got != want || len(seen) != workers*each {
		t.Errorf("final revision %d, %d distinct; want %d", got, len(seen), want)
	}
	for i, r := range notified {
		if r != int64(i+1) {
			t.Fatalf("subscriber saw revisions %v, want 1..%d in order", notified, workers*each)
		}
	}
	f.Close()
	again := fx.open(t)
	if got := len(again.Current().Rules()); got != workers*each {
		t.Errorf("after reopen %d rules, want %d", got, workers*each)
	}
	noTempFiles(t, fx.path)
}

func TestRun(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	loaded := make(chan int64, 1)
	f.Subscribe(func(ix *rules.Index) { loaded <- ix.Revision() })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	fx.write(t, "rules:\n  - {id: a, limit: 1, window: 1s}\n")
	fx.tick <- time.Now() // Run is receiving: the next poll comes after this
	if got := <-loaded; got != 1 {
		t.Errorf("revision loaded by Run = %d, want 1", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled", err)
	}

	go func() { done <- f.Run(context.Background()) }()
	fx.tick <- time.Now()
	f.Close()
	if err := <-done; err != nil {
		t.Errorf("Run after Close = %v, want nil", err)
	}
	if _, err := f.Update(context.Background(), -1, addRule(rule("b", 1))); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close error = %v, want ErrClosed", err)
	}
}

func TestUpdateCanceled(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Update(ctx, -1, addRule(rule("a", 1))); !errors.Is(err, context.Canceled) {
		t.Errorf("Update(canceled ctx) error = %v, want context.Canceled", err)
	}
	if got := f.Current().Revision(); got != 0 {
		t.Errorf("revision = %d, want 0", got)
	}
}

func TestFileConfigValidate(t *testing.T) {
	want := fmt.Sprintf("rulestore: poll interval must be ≥ 0 (0 = default %s), got -1s", DefaultFileConfig().PollInterval)
	if _, err := OpenFile(FileConfig{Path: filepath.Join(t.TempDir(), "r.yaml"), PollInterval: -time.Second}); err == nil || err.Error() != want {
		t.Errorf("OpenFile(PollInterval -1s) = %v, want %q", err, want)
	}
}

// BenchmarkUpdate measures one API change: clone, compile, render, atomic
// write with two fsyncs, over a set of 100 rules.
func BenchmarkUpdate(b *testing.B) {
	fx := &fixture{path: filepath.Join(b.TempDir(), "rules.yaml"), logs: &logBuf{}}
	f, err := OpenFile(FileConfig{Path: fx.path, Logger: slog.New(slog.NewTextHandler(fx.logs, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	for i := range 100 {
		r := rule(fmt.Sprintf("r%d", i), 10)
		r.Match.Endpoint = fmt.Sprintf("GET /r%d", i) // at most 32 rules match a call
		if _, err := f.Update(ctx, -1, addRule(r)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := f.Update(ctx, -1, func(s *rules.Set) error {
			s.Rules[0].Limit = int64(i%1000 + 1)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPollUnchanged is the cost of one Run tick when nothing changed.
func BenchmarkPollUnchanged(b *testing.B) {
	path := filepath.Join(b.TempDir(), "rules.yaml")
	f, err := OpenFile(FileConfig{Path: path, Logger: slog.New(slog.NewTextHandler(&logBuf{}, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	f.Poll()
	b.ReportAllocs()
	for b.Loop() {
		f.Poll()
	}
}
