package rulestore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/rules"
)

// writable reports whether the existing file at path, with permission
// bits perm, may be written: the rename that replaces it needs only the
// directory's permission, so the file's own is checked first. Root may
// write any file, so a file no one may write (chmod a-w) is refused by its
// bits; otherwise opening it for writing (without truncating) asks the
// system.
func writable(path string, perm fs.FileMode) error {
	if perm&0o222 == 0 {
		return fmt.Errorf("mode %04o: %w", perm, errReadOnlyFile)
	}
	fl, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return fl.Close()
}

func statFile(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{mtime: fi.ModTime(), size: fi.Size()}, nil
}

// readStamped reads a file and the stamp it had before the read: a write
// after the stat changes the stamp, so the next poll reads again.
func readStamped(path string) (stamp, []byte, error) {
	fl, err := os.Open(path)
	if err != nil {
		return stamp{}, nil, err
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil {
		return stamp{}, nil, err
	}
	if fi.IsDir() {
		return stamp{}, nil, fmt.Errorf("%s: is a directory, want a YAML file", path)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(fl); err != nil {
		return stamp{}, nil, err
	}
	return stamp{mtime: fi.ModTime(), size: fi.Size()}, b.Bytes(), nil
}

// writeAtomic replaces the file at path (or, if path is a symlink, the file
// it points to, the link staying as it is) with data, so that a reader sees
// the old content or the new, never a mix, and the new content survives a
// crash once it returns. The file keeps its permission bits, less any for
// group and others when secret (it holds API keys): a new file gets 0644,
// or 0600 when secret. A file that may not be written (see writable), or
// one in a Kubernetes ConfigMap or Secret volume (errMountedVolume), is
// refused before anything is written.
func writeAtomic(path string, data []byte, secret bool) error {
	return replaceFile(path, data, secret, true)
}

// tryWrite is writeAtomic up to the rename: it writes data to the
// temporary file and removes it, so that a dry run meets the failures a
// write would (a full disk, a read-only file system or file, no
// permission) and changes nothing.
func tryWrite(path string, data []byte, secret bool) error {
	return replaceFile(path, data, secret, false)
}

// holdsKeys reports whether a rules file of s holds API keys in clear
// (clients "api_key:…"), so that it must not be readable by others.
func holdsKeys(s *rules.Set) bool {
	if s == nil {
		return false
	}
	for id := range s.Clients {
		if strings.HasPrefix(id, "api_key:") {
			return true
		}
	}
	return false
}

// errMountedVolume: the rules file lives in a volume the kubelet keeps (a
// ConfigMap, Secret or projected volume): a symlink through "..data" into
// a timestamped directory, which the kubelet swaps on every update. A
// write there would be lost at the next update, or replace the mount's
// content behind Kubernetes' back.
var errMountedVolume = errors.New("it is in a Kubernetes ConfigMap or Secret volume, which the kubelet owns")

// mountedVolume reports whether path reaches its file through a kubelet
// atomic-writer link ("..data"): the link farm of a ConfigMap, Secret or
// projected volume.
func mountedVolume(path string) bool {
	for p, hops := path, 0; hops < 40; hops++ {
		target, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		for _, part := range strings.Split(filepath.ToSlash(target), "/") {
			if part == "..data" {
				return true
			}
		}
		p = target
	}
	_, err := os.Lstat(filepath.Join(filepath.Dir(path), "..data"))
	return err == nil
}

// replaceFile is writeAtomic, renaming the temporary file over path only
// when commit is set.
func replaceFile(path string, data []byte, secret, commit bool) (err error) {
	if mountedVolume(path) {
		return errMountedVolume
	}
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	perm := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		perm = fi.Mode().Perm()
		if err := writable(path, perm); err != nil {
			return err
		}
	}
	if secret {
		perm &= 0o600
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if !commit {
		return nil // the deferred removal drops the temporary file
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
