//go:build !unix

package rulestore

import "io/fs"

// inode is 0 where the system has none to give.
func inode(fs.FileInfo) uint64 { return 0 }
