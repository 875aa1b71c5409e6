package rulestore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/envoyconf"
)

// EnvoyDirConfig configures an EnvoyDir: envoyproxy/ratelimit's runtime
// directory settings, under its environment variables' names.
type EnvoyDirConfig struct {
	// Root is RUNTIME_ROOT (envoyproxy/ratelimit's default
	// /srv/runtime_data/current) and Subdirectory RUNTIME_SUBDIRECTORY
	// (required: without it envoyproxy/ratelimit loads nothing).
	Root, Subdirectory string
	// AppDirectory is RUNTIME_APPDIRECTORY. Default "config".
	AppDirectory string
	// AppDirectoryOnly is RUNTIME_WATCH_ROOT=false: the files are every
	// file under Root/Subdirectory/AppDirectory. When false (its default),
	// they are every file under Root/Subdirectory whose path from there,
	// with "/" read as ".", starts with AppDirectory + "." — the files
	// under AppDirectory, and also a file such as config.yaml beside it,
	// as envoyproxy/ratelimit loads them.
	AppDirectoryOnly bool
	// IgnoreDotFiles is RUNTIME_IGNOREDOTFILES: files and directories
	// whose name starts with "." are skipped. Set it for a Kubernetes
	// ConfigMap mount, whose ..data and ..<timestamp> entries otherwise
	// load every file twice (a domain in two files: refused).
	IgnoreDotFiles bool
	// Options are the loader's (MERGE_DOMAIN_CONFIG).
	Options envoyconf.Options
	// PollInterval is how often Run looks at the files. Default 1s. Each
	// look is a directory listing and one stat per file; the files are
	// read only when a stat changed.
	PollInterval time.Duration
	// Logger, Now and Tick are as in FileConfig.
	Logger *slog.Logger
	Now    func() time.Time
	Tick   func(d time.Duration) (<-chan time.Time, func())
}

// EnvoyDir is a Source that serves envoyproxy/ratelimit's configuration
// from its runtime directory as that service reads it (see
// EnvoyDirConfig and envoyconf.Load), and follows every change: an edit,
// a file added or removed, a symlink swapped (RUNTIME_ROOT pointed
// elsewhere, a Kubernetes ConfigMap's ..data replaced). A change is put in
// force once the files stay the same for one read: a swap seen half done
// is read again at the next poll. A change that does not load, or a
// directory that cannot be read, leaves the last good rules in force;
// see envoyHead. Update is refused: the files are the configuration.
//
// Safe for concurrent use. Create one with OpenEnvoyDir.
type EnvoyDir struct {
	envoyHead
	cfg  EnvoyDirConfig
	base string // the directory walked

	pollMu sync.Mutex
	seen   []fileStamp // of the files in force or last refused

	done      chan struct{}
	closeOnce sync.Once
}

var _ Source = (*EnvoyDir)(nil)

// fileStamp is what a stat says about one configuration file.
type fileStamp struct {
	key   string // its name as envoyproxy/ratelimit names it: the path from the walked directory, "/" as "."
	path  string
	mtime time.Time
	size  int64
	ino   uint64
}

// Dir returns the directory the configuration is read from.
func (c EnvoyDirConfig) Dir() string {
	return filepath.Join(c.Root, c.Subdirectory, cmp.Or(c.AppDirectory, "config"))
}

// OpenEnvoyDir loads the configuration. A directory that does not exist
// or a configuration that does not load is an error naming the file, the
// line and the problem.
func OpenEnvoyDir(cfg EnvoyDirConfig) (*EnvoyDir, error) {
	if cfg.Subdirectory == "" {
		return nil, errors.New("rulestore: envoyproxy/ratelimit runtime directory: RUNTIME_SUBDIRECTORY is empty; " +
			"envoyproxy/ratelimit then loads no configuration at all: set it to the directory under RUNTIME_ROOT that holds " + cmp.Or(cfg.AppDirectory, "config") + "/")
	}
	if err := notNegative("poll interval", cfg.PollInterval, time.Second); err != nil {
		return nil, err
	}
	cfg.AppDirectory = cmp.Or(cfg.AppDirectory, "config")
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.Logger, cfg.Now, cfg.Tick = runtimeDefaults(cfg.Logger, cfg.Now, cfg.Tick)
	d := &EnvoyDir{cfg: cfg, done: make(chan struct{})}
	d.base = filepath.Join(cfg.Root, cfg.Subdirectory)
	if cfg.AppDirectoryOnly {
		d.base = filepath.Join(d.base, cfg.AppDirectory)
	}
	d.envoyHead = envoyHead{kind: "envoy-runtime", location: cfg.Dir(), opt: cfg.Options, log: cfg.Logger, now: cfg.Now}
	d.st = Status{Kind: "envoy-runtime", Location: cfg.Dir()}
	if fi, err := os.Stat(cfg.Dir()); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("rulestore: envoyproxy/ratelimit runtime directory %s (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY): %w", cfg.Dir(), err)
	}
	// A swap seen half done at start is read again at once.
	var err error
	for range 5 {
		var files []envoyconf.File
		var stamps []fileStamp
		var stable bool
		if stamps, files, stable, err = d.read(); err != nil {
			return nil, err
		}
		if !stable {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err = d.load(files, true); err != nil {
			return nil, d.hint(stamps, err)
		}
		d.seen = stamps
		return d, nil
	}
	return nil, fmt.Errorf("rulestore: envoyproxy/ratelimit runtime directory %s: its files kept changing while they were read; try again", cfg.Dir())
}

// list returns the stamps of the configuration files, in key order.
func (d *EnvoyDir) list() ([]fileStamp, error) {
	var out []fileStamp
	var walk func(dir, key string) error
	walk = func(dir, key string) error {
		des, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, de := range des {
			name := de.Name()
			if d.cfg.IgnoreDotFiles && strings.HasPrefix(name, ".") {
				continue
			}
			p, k := filepath.Join(dir, name), name
			if key != "" {
				k = key + "." + name
			}
			if de.IsDir() { // a real directory; a symlink to one is not followed, as envoyproxy/ratelimit's walk does not
				if err := walk(p, k); err != nil {
					return err
				}
				continue
			}
			fi, err := os.Stat(p)
			if err != nil || fi.IsDir() {
				continue // a dangling symlink, or one to a directory (a ConfigMap's ..data): envoyproxy/ratelimit skips it
			}
			if !d.cfg.AppDirectoryOnly && !strings.HasPrefix(k, d.cfg.AppDirectory+".") {
				continue
			}
			st := fileStamp{key: k, path: p, mtime: fi.ModTime(), size: fi.Size()}
			st.ino = inode(fi)
			out = append(out, st)
		}
		return nil
	}
	if err := walk(d.base, ""); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b fileStamp) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// read lists and reads the files. stable is false when they changed while
// they were read (a swap half done): read again later.
func (d *EnvoyDir) read() (stamps []fileStamp, files []envoyconf.File, stable bool, err error) {
	stamps, err = d.list()
	if err != nil {
		return nil, nil, false, fmt.Errorf("rulestore: envoyproxy/ratelimit runtime directory %s: %w", d.cfg.Dir(), err)
	}
	for _, st := range stamps {
		b, err := os.ReadFile(st.path)
		if errors.Is(err, fs.ErrNotExist) {
			return stamps, nil, false, nil
		}
		if err != nil {
			return nil, nil, false, fmt.Errorf("rulestore: envoyproxy/ratelimit runtime directory: %w", err)
		}
		files = append(files, envoyconf.File{Name: d.name(st), Data: b})
	}
	after, err := d.list()
	if err != nil || !slices.Equal(after, stamps) {
		return stamps, nil, false, nil
	}
	return stamps, files, true, nil
}

// name is a file's name in errors: its path from the configuration
// directory when it is under it, else from the walked directory.
func (d *EnvoyDir) name(st fileStamp) string {
	if rel, err := filepath.Rel(d.cfg.Dir(), st.path); err == nil && !strings.HasPrefix(rel, "..") {
		return filepath.Join(filepath.Base(d.cfg.Dir()), rel)
	}
	rel, _ := filepath.Rel(d.base, st.path)
	return rel
}

// Poll looks at the files once and loads them if they changed. It returns
// the current problem (nil when the rules in force are what the files
// hold). Run calls it every PollInterval; tests call it directly.
func (d *EnvoyDir) Poll() error {
	d.pollMu.Lock()
	defer d.pollMu.Unlock()
	stamps, err := d.list()
	if err != nil {
		err = fmt.Errorf("rulestore: envoyproxy/ratelimit runtime directory %s: %w", d.cfg.Dir(), err)
		return d.fail(err.Error(), err)
	}
	if slices.Equal(stamps, d.seen) {
		if st := d.Status(); st.Error != "" {
			return errors.New(st.Error)
		}
		return nil
	}
	stamps, files, stable, err := d.read()
	switch {
	case err != nil:
		return d.fail(err.Error(), err)
	case !stable:
		return nil // seen again at the next poll
	}
	err = d.load(files, false)
	d.seen = stamps
	return err
}

// hint adds to err, when files under a ".." directory were loaded, that
// they are a Kubernetes ConfigMap mount's and RUNTIME_IGNOREDOTFILES skips
// them.
func (d *EnvoyDir) hint(stamps []fileStamp, err error) error {
	for _, st := range stamps {
		if strings.Contains(st.key, "..") {
			return fmt.Errorf("%w (the files under %s are a Kubernetes ConfigMap mount's own copies, read as well: set RUNTIME_IGNOREDOTFILES=true to skip them, as envoyproxy/ratelimit also needs)",
				err, filepath.Join(filepath.Dir(st.path)))
		}
	}
	return err
}

// Run polls every PollInterval until ctx is done (returning ctx.Err()) or
// the EnvoyDir is closed (returning nil).
func (d *EnvoyDir) Run(ctx context.Context) error {
	return pollEvery(ctx, d.cfg.Tick, d.cfg.PollInterval, d.done, d.Poll)
}

// Close stops Run. It is safe to call more than once.
func (d *EnvoyDir) Close() error {
	d.closeOnce.Do(func() { close(d.done) })
	return nil
}
