//go:build unix

package logindtest_test

import (
	"os"
	"syscall"
)

// dupFile returns a second descriptor for the same open file.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
