// Package system is the real machine behind handoff.Host and handoff.Kernel:
// files under /run and /proc, terminals, sync(2) and reboot(2).
//
// Paths are resolved under Root so that tests can point it at a temporary
// directory. Kernel is separate from Host so that nothing but the real
// command ever holds the reboot(2) implementation.
package system

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gnsh/gnsh/internal/handoff"
)

// Host implements handoff.Host on the running machine.
type Host struct {
	Root   string // "" means "/"
	Getenv func(string) string
}

var _ handoff.Host = (*Host)(nil)

func (h *Host) path(p string) string {
	if h.Root == "" {
		return p
	}
	return filepath.Join(h.Root, p)
}

func (h *Host) getenv(k string) string {
	if h.Getenv == nil {
		return os.Getenv(k)
	}
	return h.Getenv(k)
}

// Euid returns the effective user ID.
func (h *Host) Euid() int { return os.Geteuid() }

// UID returns the real user ID.
func (h *Host) UID() int { return os.Getuid() }

// OnTTY is systemd's on_tty(): stdout and stderr are both terminals.
func (h *Host) OnTTY() bool { return isTerminal(1) && isTerminal(2) }

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// InChroot is systemd's running_in_chroot() > 0: "/" is not PID 1's root.
// $SYSTEMD_IGNORE_CHROOT turns the check off, as in systemd.
func (h *Host) InChroot() bool {
	if parseBool(h.getenv("SYSTEMD_IGNORE_CHROOT")) {
		return false
	}
	var a, b unix.Stat_t
	if unix.Stat(h.path("/proc/1/root"), &a) != nil || unix.Stat(h.path("/"), &b) != nil {
		return false
	}
	return a.Dev != b.Dev || a.Ino != b.Ino
}

// InContainer approximates systemd's detect_container() for the one place it
// matters (reboot parameters are not passed to the kernel in containers).
func (h *Host) InContainer() bool {
	if b, err := os.ReadFile(h.path("/run/systemd/container")); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return true
	}
	if b, err := os.ReadFile(h.path("/proc/1/environ")); err == nil {
		for _, kv := range bytes.Split(b, []byte{0}) {
			if bytes.HasPrefix(kv, []byte("container=")) && len(kv) > len("container=") {
				return true
			}
		}
	}
	return false
}

// KexecLoaded reports whether /sys/kernel/kexec_loaded says 1.
func (h *Host) KexecLoaded() bool {
	b, err := os.ReadFile(h.path("/sys/kernel/kexec_loaded"))
	return err == nil && len(b) > 0 && b[0] == '1'
}

// Runlevel is systemd's utmp_get_runlevel(): $RUNLEVEL if set, else the
// RUN_LVL record of /run/utmp. ok is false when neither says anything.
func (h *Host) Runlevel() (level byte, ok bool) {
	if e := h.getenv("RUNLEVEL"); e != "" {
		return e[0], true
	}
	b, err := os.ReadFile(h.path("/run/utmp"))
	if err != nil {
		return 0, false
	}
	const recSize, runLvl = 384, 1
	for off := 0; off+recSize <= len(b); off += recSize {
		if int16(binary.LittleEndian.Uint16(b[off:])) == runLvl {
			return byte(binary.LittleEndian.Uint32(b[off+4:]) & 0xff), true
		}
	}
	return 0, false
}

const rebootParamFile = "/run/systemd/reboot-param"

// RebootParam returns the first line of /run/systemd/reboot-param.
func (h *Host) RebootParam() string {
	b, err := os.ReadFile(h.path(rebootParamFile))
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}

// WriteRebootParam writes "param\n" atomically with mode 0644, never
// following a symlink: a temporary file created O_EXCL|O_NOFOLLOW in the
// same directory, then rename(2).
func (h *Host) WriteRebootParam(param string) error {
	dst := h.path(rebootParamFile)
	dir := filepath.Dir(dst)
	var f *os.File
	var err error
	for i := 0; i < 100; i++ {
		name := filepath.Join(dir, ".#reboot-param"+strconv.FormatUint(uint64(os.Getpid())*1000+uint64(i), 36))
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return unwrapPath(err)
	}
	tmp := f.Name()
	_, err = f.WriteString(param + "\n")
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return unwrapPath(err)
	}
	return nil
}

// UnlinkRebootParam removes /run/systemd/reboot-param; a missing file is
// not an error.
func (h *Host) UnlinkRebootParam() error {
	err := os.Remove(h.path(rebootParamFile))
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return unwrapPath(err)
}

// unwrapPath strips Go's "op path:" prefix so that %m-style messages match.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// Sessions reads /run/systemd/sessions the way sd_get_sessions() and
// sd_session_get_*() do: one regular, non-hidden file per session.
func (h *Host) Sessions() []handoff.Session {
	dir := h.path("/run/systemd/sessions")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []handoff.Session
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		kv := parseEnvFile(string(b))
		uid, err := strconv.ParseUint(kv["UID"], 10, 32)
		if err != nil {
			continue
		}
		out = append(out, handoff.Session{ID: e.Name(), UID: uint32(uid), Class: kv["CLASS"], Type: kv["TYPE"],
			TTY: kv["TTY"], Seat: kv["SEAT"], Service: kv["SERVICE"]})
	}
	return out
}

func parseEnvFile(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// UserName is systemd's uid_to_name(): the user name, or the number.
func (h *Host) UserName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return id
}

// ProcessComm reads /proc/PID/comm.
func (h *Host) ProcessComm(pid uint32) string {
	b, err := os.ReadFile(h.path("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// parseBool is systemd's parse_boolean() for environment switches.
func parseBool(s string) bool {
	switch strings.ToLower(s) {
	case "1", "yes", "y", "true", "t", "on":
		return true
	}
	return false
}

// Kernel is the real sync(2) and reboot(2).
//
// IMPORTANT: Reboot really reboots the machine (or, in a child PID
// namespace, ends that namespace). Never use it in tests outside a
// throwaway PID namespace or container.
type Kernel struct{}

var _ handoff.Kernel = Kernel{}

// Sync flushes file systems.
func (Kernel) Sync() { unix.Sync() }

// Reboot calls reboot(2).
func (Kernel) Reboot(cmd handoff.RebootCmd, arg string) error {
	switch cmd {
	case handoff.CmdEnableCAD:
		return unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_ON)
	case handoff.CmdHalt:
		return unix.Reboot(unix.LINUX_REBOOT_CMD_HALT)
	case handoff.CmdPowerOff:
		return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	case handoff.CmdRestart:
		return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	case handoff.CmdRestart2:
		p, err := unix.BytePtrFromString(arg)
		if err != nil {
			return err
		}
		_, _, e := unix.Syscall6(unix.SYS_REBOOT, unix.LINUX_REBOOT_MAGIC1, unix.LINUX_REBOOT_MAGIC2,
			unix.LINUX_REBOOT_CMD_RESTART2, uintptr(unsafe.Pointer(p)), 0, 0)
		if e != 0 {
			return e
		}
		return nil
	}
	return unix.EINVAL
}
