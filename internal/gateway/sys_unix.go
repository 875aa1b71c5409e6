//go:build unix && !linux

package gateway

import "syscall"

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket
// (see sys_linux.go).
func sysRead(fd uintptr, p []byte) (int, error)  { return syscall.Read(int(fd), p) }
func sysWrite(fd uintptr, p []byte) (int, error) { return syscall.Write(int(fd), p) }
