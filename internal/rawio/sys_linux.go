package rawio

import (
	"os"
	"syscall"
	"unsafe"
)

// rawCalls: raw system calls are made unless SLUICE_RAW_IO turns them off.
var rawCalls = enabledBy(os.Getenv("SLUICE_RAW_IO"))

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket,
// made as raw system calls: the Go scheduler is not told of them, as it
// is of syscall.Read and syscall.Write.
//
// They never wait (the socket is non-blocking), but on loopback a write
// runs the receiver's TCP work too and takes tens of microseconds at
// times. A system call the scheduler is told of and that runs longer than
// its monitor's tick (20 µs) has its P handed to another thread, and
// while that happens the monitor wakes every 20 µs instead of sleeping:
// under load, those wake-ups and hand-overs were the gateway's largest
// single cost in the kernel (context switches). A raw call that is slow
// holds its P as running Go code would.
//
// With raw calls off (SLUICE_RAW_IO=0) they are syscall.Read and
// syscall.Write, which the scheduler is told of.
func sysRead(fd uintptr, p []byte) (int, error) {
	if !rawCalls {
		return syscall.Read(int(fd), p)
	}
	return rawCall(syscall.SYS_READ, fd, p)
}

func sysWrite(fd uintptr, p []byte) (int, error) {
	if !rawCalls {
		return syscall.Write(int(fd), p)
	}
	return rawCall(syscall.SYS_WRITE, fd, p)
}

// rawCall is the system call trap (read or write) on fd and p.
func rawCall(trap, fd uintptr, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := syscall.RawSyscall(trap, fd, uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
