package rulestore

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// asRoot makes the calling test run with the privileges it needs to mount
// a file system: as root it returns true at once; otherwise it runs the
// test again in a user and mount namespace of its own (unshare -rm), where
// the test is root of its own mounts, reports that run, and returns false:
// the caller then returns.
func asRoot(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() == 0 {
		return true
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount",
		os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1", "-test.v")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s needs to mount a tmpfs: run as root, or where unshare --user --mount works (%v):\n%s", top, err, out)
	}
	t.Logf("ran in a user and mount namespace of its own:\n%s", out)
	return false
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory and returns
// the directory; it is unmounted when the test ends. The caller must be
// root (asRoot).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until its file system has no space left.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for range 1 << 20 { // far more than any test's tmpfs holds
		if _, err := f.Write(chunk); err != nil {
			return path
		}
	}
	t.Fatalf("%s never filled up", dir)
	return ""
}

// written is a rules file with rule a written through the API, whose next
// write, rule b, a test makes fail.
type written struct {
	f       *File
	path    string
	before  *rules.Index // in force after rule a
	content string       // the file after rule a
}

// writeFirst opens fx's file and writes rule a through it.
func writeFirst(t *testing.T, fx *fixture) *written {
	t.Helper()
	f := fx.open(t)
	before, err := f.Update(context.Background(), -1, addRule(rule("a", 10)))
	if err != nil {
		t.Fatal(err)
	}
	return &written{f: f, path: fx.path, before: before, content: fx.read(t)}
}

// wantRefused writes rule b and checks that the write failed and changed
// nothing: the error is ErrUnavailable naming cause, the file, and fix;
// the rules in force, the revision and the file are as before; no
// temporary file is left; no subscriber was called.
func (w *written) wantRefused(t *testing.T, cause, fix string) {
	t.Helper()
	calls := 0
	w.f.Subscribe(func(*rules.Index) { calls++ })
	_, err := w.f.Update(context.Background(), -1, addRule(rule("b", 10)))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Update error = %v, want ErrUnavailable (HTTP 503)", err)
	}
	for _, want := range []string{cause, w.path, fix} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Update error = %q, want it to name %q", err, want)
		}
	}
	if w.f.Current() != w.before {
		t.Errorf("Current() changed to revision %d, want revision %d kept", w.f.Current().Revision(), w.before.Revision())
	}
	if got, err := os.ReadFile(w.path); err != nil || string(got) != w.content {
		t.Errorf("the rules file changed after a refused write (err %v)", err)
	}
	if calls != 0 {
		t.Errorf("subscribers called %d times after a refused write, want 0", calls)
	}
	ents, _ := os.ReadDir(filepath.Dir(w.path))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// wantNext writes rule b again, once the cause is gone (after, for the
// message), and checks that it lands on the next revision.
func (w *written) wantNext(t *testing.T, after string) {
	t.Helper()
	ix, err := w.f.Update(context.Background(), -1, addRule(rule("b", 10)))
	if err != nil {
		t.Fatalf("Update %s: %v", after, err)
	}
	if got, want := ix.Revision(), w.before.Revision()+1; got != want {
		t.Errorf("revision = %d, want %d", got, want)
	}
}

// TestUpdateReadOnlyFile: a rules file set read-only (chmod 0444) is not
// replaced by an API write, even by root, which the rename would allow; the
// write is refused naming the file and the fix, and a hand edit still loads.
func TestUpdateReadOnlyFile(t *testing.T) {
	fx := newFixture(t)
	w := writeFirst(t, fx)
	if err := os.Chmod(fx.path, 0o444); err != nil {
		t.Fatal(err)
	}
	w.wantRefused(t, "the rules file is read-only", "chmod u+w")
	if fi, err := os.Stat(fx.path); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("rules file mode = %v (err %v), want 0444 kept", fi.Mode().Perm(), err)
	}

	// Made writable again, the next write lands on the next revision.
	if err := os.Chmod(fx.path, 0o644); err != nil {
		t.Fatal(err)
	}
	w.wantNext(t, "after chmod u+w")
}

// TestUpdatePermissionDenied: a directory sluice may not write in refuses
// the write with 503 naming the permission. As root, which ignores mode
// bits, the directory is made immutable (chattr +i) instead of chmod 0555.
func TestUpdatePermissionDenied(t *testing.T) {
	fx := newFixture(t)
	w := writeFirst(t, fx)
	dir := filepath.Dir(fx.path)
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
			t.Fatalf("chattr +i %s: %v: %s", dir, err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	} else {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	}
	w.wantRefused(t, "permission denied", "write permission")
}

// TestUpdateDiskFull: a full disk refuses the write with 503 saying so;
// nothing is kept, and once space is freed the next write lands on the
// next revision.
func TestUpdateDiskFull(t *testing.T) {
	if !asRoot(t) {
		return
	}
	fx := newFixture(t)
	fx.path = filepath.Join(mountTmpfs(t, "64k"), "rules.yaml")
	fx.cfg.Path = fx.path
	w := writeFirst(t, fx)
	filler := fill(t, filepath.Dir(fx.path))
	w.wantRefused(t, "the disk is full", "free space")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	w.wantNext(t, "after freeing space")
}

// TestUpdateReadOnlyFileSystem: a file system remounted read-only refuses
// the write with 503 saying so.
func TestUpdateReadOnlyFileSystem(t *testing.T) {
	if !asRoot(t) {
		return
	}
	fx := newFixture(t)
	dir := mountTmpfs(t, "1m")
	fx.path = filepath.Join(dir, "rules.yaml")
	fx.cfg.Path = fx.path
	w := writeFirst(t, fx)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "remount,ro,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s read-only: %v: %s", dir, err, out)
	}
	w.wantRefused(t, "the file system is read-only", "read-write")
}
