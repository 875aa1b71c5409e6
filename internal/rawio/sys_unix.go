//go:build unix && !linux

package rawio

import "syscall"

const rawCalls = false

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket
// (see sys_linux.go): here they are syscall.Read and syscall.Write.
func sysRead(fd uintptr, p []byte) (int, error)  { return syscall.Read(int(fd), p) }
func sysWrite(fd uintptr, p []byte) (int, error) { return syscall.Write(int(fd), p) }
