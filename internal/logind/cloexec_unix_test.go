//go:build unix

package logind

import (
	"os"
	"syscall"
)

func isCloseOnExec(f *os.File) (bool, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var flags uintptr
	var errno syscall.Errno
	if err := sc.Control(func(fd uintptr) {
		flags, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFD, 0)
	}); err != nil {
		return false, err
	}
	if errno != 0 {
		return false, errno
	}
	return flags&syscall.FD_CLOEXEC != 0, nil
}
