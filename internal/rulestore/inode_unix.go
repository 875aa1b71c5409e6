//go:build unix

package rulestore

import (
	"io/fs"
	"syscall"
)

// inode returns the inode number of fi's file: a file replaced by another
// of the same size and time is seen as changed.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
