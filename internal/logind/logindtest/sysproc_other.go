//go:build !linux

package logindtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
