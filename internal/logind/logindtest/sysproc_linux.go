package logindtest

import "syscall"

// sysProcAttr makes the kernel kill dbus-daemon if the test binary dies
// without running its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
