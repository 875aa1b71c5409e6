package rulestore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/rulecheck"
	"github.com/sluicehq/sluice/internal/seam/rulewire"
	"github.com/sluicehq/sluice/rules"
)

// FileConfig configures a File. The zero value is usable: OpenFile fills
// every zero field with its default (see DefaultFileConfig).
type FileConfig struct {
	// Path of the YAML rules file. Default "sluice-rules.yaml", in the
	// working directory. When it is missing, OpenFile creates it with a
	// commented example.
	Path string
	// PollInterval is how often Run checks the file for hand edits. Default
	// 1s. Each check is one stat (and a read only when the file changed);
	// shorter puts edits in force sooner for a little more I/O.
	PollInterval time.Duration
	// Logger receives reloads and load errors. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of Status times. Default time.Now.
	Now func() time.Time
	// Tick makes the ticker Run polls on: it returns the tick channel and a
	// function that stops it. Default time.NewTicker(d). Tests pass a
	// channel they send on.
	Tick func(d time.Duration) (<-chan time.Time, func())
}

// DefaultFileConfig returns the configuration OpenFile uses for zero fields.
func DefaultFileConfig() FileConfig {
	return FileConfig{
		Path:         "sluice-rules.yaml",
		PollInterval: time.Second,
		Logger:       slog.Default(),
		Now:          time.Now,
		Tick: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
	}
}

// Validate reports a configuration OpenFile cannot use.
func (c FileConfig) Validate() error {
	return notNegative("poll interval", c.PollInterval, DefaultFileConfig().PollInterval)
}

// notNegative reports a setting given as v < 0, where 0 stands for def.
func notNegative[T ~int32 | ~int64](setting string, v, def T) error {
	if v < 0 {
		return fmt.Errorf("rulestore: %s must be ≥ 0 (0 = default %v), got %v", setting, def, v)
	}
	return nil
}

func (c FileConfig) withDefaults() FileConfig {
	d := DefaultFileConfig()
	c.Path = cmp.Or(c.Path, d.Path)
	c.PollInterval = cmp.Or(c.PollInterval, d.PollInterval)
	c.Logger, c.Now, c.Tick = runtimeDefaults(c.Logger, c.Now, c.Tick)
	return c
}

// tickFunc makes a ticker: its channel and the function that stops it.
type tickFunc = func(d time.Duration) (<-chan time.Time, func())

// runtimeDefaults returns the logger and clocks a store runs with, the
// same for a rules file and a database: each one given, else
// DefaultFileConfig's.
func runtimeDefaults(log *slog.Logger, now func() time.Time, tick tickFunc) (*slog.Logger, func() time.Time, tickFunc) {
	d := DefaultFileConfig()
	if now == nil {
		now = d.Now
	}
	if tick == nil {
		tick = d.Tick
	}
	return cmp.Or(log, d.Logger), now, tick
}

// File is a Source backed by a YAML file that operators may also edit by
// hand.
//
// Changes through Update rewrite the file keeping what its author wrote —
// the order of its keys, its comments, every rule and client they did not
// change — atomically (a temporary file in
// the same directory, fsync, rename, fsync of the directory) and keep its
// permissions (0644 for a new file), less any for group and others once it
// holds API keys (clients "api_key:…", 0600 for a new file); the file holds
// the revision, so it survives restarts. A symlinked file is written
// through: the file it points to is replaced and the link stays. A file in
// a Kubernetes ConfigMap or Secret volume (reached through the kubelet's
// "..data" link) is never written: Update fails with ErrUnavailable. A write that fails — a full disk, a read-only file
// system, no permission, or a rules file whose permission bits allow no
// writes (chmod a-w, which the rename alone would ignore) — fails with
// ErrUnavailable naming the cause and its fix, and changes nothing: no
// temporary file is left and the rules in force and their revision stay.
// Hand edits are found by Poll (called by Run every
// PollInterval): a changed mtime or size makes it read the file, and a
// changed content hash makes it load it. A loaded edit gets the revision
// max(file revision, current + 1). An edit that does not load leaves the
// last good rules in force, is logged once, and shows in Status().Error
// until a good version is loaded; meanwhile Update fails with
// ErrUnavailable rather than overwrite the operator's edit.
//
// A File is safe for concurrent use. Create one with OpenFile.
type File struct {
	path string
	poll time.Duration
	log  *slog.Logger
	now  func() time.Time
	tick func(time.Duration) (<-chan time.Time, func())
	// writeFile replaces the file's content atomically; tests swap it for
	// one that fails.
	writeFile func(path string, data []byte, secret bool) error

	cur atomic.Pointer[rules.Index]

	// mu serializes Update and Poll, and with them the subscriber calls. It
	// guards the fields below.
	mu     sync.Mutex
	closed bool
	seen   stamp    // the file's mtime and size when last read or written
	hash   [32]byte // content hash of the rules in force
	text   []byte   // the file's content whose rules are in force: the layout a write keeps
	// bad is the key of the last problem logged ("" when healthy): the hash
	// of a broken content, or the text of a read error.
	bad        string
	badErr     error
	badMissing bool // the problem is that the file does not exist

	watched

	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

var _ Source = (*File)(nil)

// stamp is what a stat tells about a file's content without reading it.
type stamp struct {
	mtime time.Time
	size  int64
}

// OpenFile loads the rules file named by cfg.Path, creating it with a
// commented example when it does not exist. A file that exists but does not
// load is an error that names the file, the line and the problem.
func OpenFile(cfg FileConfig) (*File, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f := &File{
		path:      cfg.Path,
		poll:      cfg.PollInterval,
		log:       cfg.Logger,
		now:       cfg.Now,
		tick:      cfg.Tick,
		writeFile: writeAtomic,
		done:      make(chan struct{}),
	}
	st, data, err := readStamped(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = []byte(exampleFile)
		if err := f.writeFile(f.path, data, false); err != nil {
			return nil, fmt.Errorf("rulestore: create %s: %w", f.path, err)
		}
		f.log.Info("rulestore: created rules file with a commented example", "path", f.path)
	case err != nil:
		return nil, fmt.Errorf("rulestore: %w", err)
	default:
		f.seen = st
	}
	ix, err := compileFile(data, -1)
	if err != nil {
		return nil, fmt.Errorf("rulestore: %s: %w", f.path, err)
	}
	f.hash, f.text = sha256.Sum256(data), data
	f.cur.Store(ix)
	f.st = Status{Kind: "file", Location: f.path, Revision: ix.Revision(), Loaded: f.now()}
	f.warnFindings(data)
	return f, nil
}

// warnFindings logs at WARN what rulecheck.Lint finds in data, a rules file
// just loaded: limits it probably misses (`sluice rules lint` prints the
// same).
func (f *File) warnFindings(data []byte) {
	fs, err := rulecheck.Lint(data)
	if err != nil {
		return
	}
	for _, fd := range fs {
		f.log.Warn("rulestore: rules file: "+fd.String()+" (sluice rules lint)", "path", f.path)
	}
}

// compileFile parses and compiles a rules file's content. The revision is
// at least minRevision.
func compileFile(data []byte, minRevision int64) (*rules.Index, error) {
	set, err := rules.ParseRulesFile(data)
	if err != nil {
		return nil, err
	}
	set.Revision = max(set.Revision, minRevision)
	return rules.Compile(set)
}

// Current returns the rules in force.
func (f *File) Current() *rules.Index { return f.cur.Load() }

// Update changes the rule set and rewrites the file; see Source. It first
// polls the file, so that a hand edit saved just before is built upon rather
// than overwritten.
func (f *File) Update(ctx context.Context, ifRevision int64, fn func(*rules.Set) error) (*rules.Index, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := f.pollLocked(); err != nil && !f.badMissing {
		return nil, fmt.Errorf("%w: %w; fix or revert the file before changing rules through the API", ErrUnavailable, err)
	}
	cur := f.cur.Load()
	if ifRevision >= 0 && ifRevision != cur.Revision() {
		return nil, fmt.Errorf("%w: the revision is %d, not %d", ErrConflict, cur.Revision(), ifRevision)
	}
	next := cur.Set().Clone()
	if next == nil {
		next = &rules.Set{}
	}
	if err := fn(next); err != nil {
		return nil, err
	}
	if unchanged(cur.Set(), next) {
		return cur, nil
	}
	next.Revision = cur.Revision() + 1
	ix, err := rules.Compile(next)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	data, err := renderOnto(f.text, next)
	if err != nil {
		return nil, err
	}
	if isDryRun(ctx) {
		if err := tryWrite(f.path, data, holdsKeys(next)); err != nil {
			return nil, writeError(f.path, cur.Revision(), err)
		}
		return ix, nil
	}
	if err := f.writeFile(f.path, data, holdsKeys(next)); err != nil {
		return nil, writeError(f.path, cur.Revision(), err)
	}
	// Forget the stamp rather than stat the new file: an edit made between
	// the rename and a stat would go unnoticed. The next Poll reads the
	// file once and finds the hash it expects.
	f.seen = stamp{}
	f.hash, f.text = sha256.Sum256(data), data
	f.clearBadLocked()
	f.installLocked(ix)
	return ix, nil
}

// errReadOnlyFile: the file's permission bits allow nobody to write it.
// writeAtomic refuses to replace it: the rename would, even as root.
var errReadOnlyFile = errors.New("its permission bits allow no writes")

// writeError is the error of an Update whose write failed: ErrUnavailable
// (HTTP 503), naming the file, the cause and what fixes it. rev is the
// revision still in force.
func writeError(path string, rev int64, err error) error {
	cause, fix := "it cannot be written", "see the error, fix it, and retry"
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		cause, fix = "the disk is full", "free space on its file system, then retry"
	case errors.Is(err, syscall.EROFS):
		cause, fix = "the file system is read-only", "remount it read-write, or point --rules at a writable place, then retry"
	case errors.Is(err, errMountedVolume):
		cause, fix = "the rules file is mounted from Kubernetes", "change the rules in the ConfigMap (kubectl apply; sluice reloads it within --rules-poll of the kubelet's update), or point --rules at a writable file to manage them through the API"
	case errors.Is(err, errReadOnlyFile):
		cause, fix = "the rules file is read-only", "chmod u+w it to allow changes through the API (or edit it by hand)"
	case errors.Is(err, fs.ErrPermission):
		cause, fix = "permission denied", "give sluice's user write permission on the file and its directory, then retry"
	}
	return fmt.Errorf("%w: cannot write the rules file %s: %s (%w); %s; the rules in force (revision %d) are unchanged",
		ErrUnavailable, path, cause, err, fix, rev)
}

// renderOnto is the file content for s written over prev, the content in
// force: prev's layout — the order of its keys, its comments, the text of
// what did not change — kept (rulewire.EncodeYAMLOnto), or, when prev has
// none to keep, render's.
func renderOnto(prev []byte, s *rules.Set) ([]byte, error) {
	if len(bytes.TrimSpace(prev)) > 0 {
		if b, err := rulewire.EncodeYAMLOnto(prev, s); err == nil {
			return b, nil
		}
	}
	return render(s)
}

// render is the file content for s: the explanatory header, then the set.
func render(s *rules.Set) ([]byte, error) {
	body, err := rules.EncodeYAML(s)
	if err != nil {
		return nil, fmt.Errorf("rulestore: encode rules: %w", err)
	}
	var b bytes.Buffer
	b.Grow(len(fileHeader) + 1 + len(body))
	b.WriteString(fileHeader)
	b.WriteByte('\n')
	b.Write(body)
	return b.Bytes(), nil
}

// Poll checks the file once and loads it if it changed since it was last
// read or written. It returns the file's current problem (nil when the
// rules in force are what the file holds): a read error, or why its content
// does not load. Run calls Poll every PollInterval; tests call it directly.
func (f *File) Poll() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pollLocked()
}

// pollLocked is Poll; f.mu must be held.
func (f *File) pollLocked() error {
	st, err := statFile(f.path)
	if err != nil {
		return f.badLocked(err.Error(), fmt.Errorf("rulestore: %w", err), errors.Is(err, fs.ErrNotExist))
	}
	if st == f.seen && f.seen != (stamp{}) {
		return f.badErr
	}
	st, data, err := readStamped(f.path)
	if err != nil {
		return f.badLocked(err.Error(), fmt.Errorf("rulestore: %w", err), errors.Is(err, fs.ErrNotExist))
	}
	f.seen = st
	h := sha256.Sum256(data)
	if h == f.hash {
		// Our own write, a touch, or a revert to the content in force.
		f.clearBadLocked()
		return nil
	}
	key := hex.EncodeToString(h[:])
	if key == f.bad {
		return f.badErr
	}
	cur := f.cur.Load()
	ix, err := compileFile(data, cur.Revision()+1)
	if err != nil {
		return f.badLocked(key, fmt.Errorf("rulestore: %s: %w", f.path, err), false)
	}
	f.hash, f.text = h, data
	f.clearBadLocked()
	f.log.Info("rulestore: loaded a hand edit of the rules file",
		"path", f.path, "revision", ix.Revision(), "rules", len(ix.Rules()))
	f.installLocked(ix)
	f.warnFindings(data)
	return nil
}

// badLocked records a problem with the file, logs it if it is not the one
// already logged, and returns it. f.mu must be held.
func (f *File) badLocked(key string, err error, missing bool) error {
	if key == f.bad {
		return f.badErr
	}
	f.bad, f.badErr, f.badMissing = key, err, missing
	f.log.Warn("rulestore: rules file does not load; keeping the last good rules",
		"path", f.path, "revision", f.cur.Load().Revision(), "error", err)
	f.setError(err.Error(), f.now())
	return err
}

// clearBadLocked forgets the last problem. f.mu must be held.
func (f *File) clearBadLocked() {
	if f.bad == "" {
		return
	}
	f.log.Info("rulestore: rules file loads again", "path", f.path)
	f.bad, f.badErr, f.badMissing = "", nil, false
	f.setError("", time.Time{})
}

// installLocked puts ix in force and tells the subscribers. f.mu must be
// held, which keeps the calls in revision order.
func (f *File) installLocked(ix *rules.Index) {
	f.cur.Store(ix)
	f.loaded(ix, f.now())
	f.tell(ix)
}

// Run polls the file every PollInterval until ctx is done (returning
// ctx.Err()) or the File is closed (returning nil).
func (f *File) Run(ctx context.Context) error {
	return pollEvery(ctx, f.tick, f.poll, f.done, f.Poll)
}

// Close stops Run; later Updates fail with ErrClosed. It is safe to call
// more than once.
func (f *File) Close() error {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		close(f.done)
	})
	return nil
}
