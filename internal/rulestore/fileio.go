package rulestore

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// it points to) with data, so that a reader sees the old content or the new,
// never a mix, and the new content survives a crash once it returns. The
// file keeps its permission bits; a new file gets 0644. A file that may not
// be written (see writable) is refused before anything is written.
func writeAtomic(path string, data []byte) error { return replaceFile(path, data, true) }

// tryWrite is writeAtomic up to the rename: it writes data to the
// temporary file and removes it, so that a dry run meets the failures a
// write would (a full disk, a read-only file system or file, no
// permission) and changes nothing.
func tryWrite(path string, data []byte) error { return replaceFile(path, data, false) }

// replaceFile is writeAtomic, renaming the temporary file over path only
// when commit is set.
func replaceFile(path string, data []byte, commit bool) (err error) {
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
