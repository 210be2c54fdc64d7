// Package caller tells whether a person at a terminal runs this command,
// or automation (unattended-upgrades, dnf-automatic, cron, a systemd
// timer, Ansible over ssh): a person's reboot that gets no slot waits, as
// before; automation's is queued (slots.queue: auto); and a person's
// terminal alone gets progress lines rewritten in place.
//
// It is a package of its own, not part of internal/system (the machine
// behind handoff.Host): it answers a question of policy from /proc and the
// terminals, needs nothing of the hand-off, and is asked by the drainer,
// gnsh plan and the queue decision alike.
//
// # The rule (as gnsh(8) quotes it)
//
// gnsh takes a command for automation when:
//
//  1. neither its stdin nor its stderr is a terminal: unattended-upgrades,
//     dnf-automatic, cron and systemd timers run shutdown so;
//  2. or the session of its terminal was started for one command: the
//     session's leader is a shell run with -c (sh -c '…', as sshd runs a
//     remote command, and so as Ansible runs its reboot over ssh -tt), a
//     shell running a script (ssh -t host ./upgrade.sh), or the command
//     itself (ssh -t host reboot, where the shell gives way to the
//     command). A session that sudo or su made for the command (sudo's
//     use_pty, su -c) is looked through to the session it was asked from.
//
// Otherwise a person is at the terminal: the session's leader is a login
// shell (-bash, as ssh, the console, tmux start it) or an interactive shell
// (bash in screen or a terminal window), or something else that is not a
// shell run for one command or script (nsenter, as node shells run bash;
// a script in another language too). By this rule `ssh -t host sudo
// reboot` is automation (a one-off command: no shell of the person's waits
// for it), and so are `run0 reboot` and `systemd-run --pty reboot`. When
// /proc cannot be read, a terminal on stdin or stderr means a person (and
// the reason says so).
//
// TERM does not change who is there (Emacs's shell is a person at a "dumb"
// terminal); but a progress line is rewritten in place only for a person
// whose stderr is a terminal and whose TERM is set and not "dumb" (Live).
package caller

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Answer is who runs the command.
type Answer struct {
	// Person: a person is at a terminal for this command; false means
	// automation.
	Person bool
	// Live: progress lines may be rewritten in place on stderr: a person,
	// stderr a terminal, TERM set and not "dumb".
	Live bool
	// Reason says why, in words, for gnsh plan and a debug line, e.g.
	// "automation: no terminal on stdin and stderr".
	Reason string
}

// Automated is Ask() for this process: whether the command runs for
// automation (no person at a terminal), and why, in words.
func Automated() (bool, string) {
	a := Ask()
	return !a.Person, a.Reason
}

// Ask answers for this process, within AskWithin.
func Ask() Answer { return Probe{}.Within(AskWithin) }

// AskWithin bounds Ask's reading of /proc: a read of a process's command
// line waits for that process's memory map (ps hangs so on a process stuck
// in the kernel), and a shutdown must not.
const AskWithin = 2 * time.Second

// Within is p.Ask(), bounded: when /proc does not answer within d, the
// answer is decided from the terminals alone, and says so.
func (p Probe) Within(d time.Duration) Answer {
	ch := make(chan Answer, 1)
	go func() { ch <- p.Ask() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case a := <-ch:
		return a
	case <-t.C:
	}
	inTTY, _ := p.terminal()(0)
	errTTY, _ := p.terminal()(2)
	if !inTTY && !errTTY {
		return Answer{Reason: "automation: no terminal on stdin and stderr"}
	}
	return p.person(errTTY, fmt.Sprintf("a terminal on stdin or stderr; /proc did not answer within %s, so decided from the terminals alone", d))
}

func (p Probe) terminal() func(int) (bool, int) {
	if p.Terminal == nil {
		return kernelTerminal
	}
	return p.Terminal
}

// person is the answer for a person at the terminal, why: Live unless
// stderr is not a terminal or TERM is unset or dumb.
func (p Probe) person(errTTY bool, why string) Answer {
	a := Answer{Person: true, Reason: "a person at a terminal: " + why}
	switch t := p.getenv("TERM"); {
	case !errTTY:
		a.Reason += " (stderr is not a terminal: progress lines are plain)"
	case t == "" || t == "dumb":
		a.Reason += " (TERM " + orUnset(t) + ": progress lines are plain)"
	default:
		a.Live = true
	}
	return a
}

// Probe holds what the answer is read from; the zero value reads the
// running process. Tests set Proc to a fake tree, Self and Terminal.
type Probe struct {
	Proc string // "/proc" if empty
	// Self is this process's PID as Proc numbers it; 0 reads "self".
	Self int
	// Terminal says whether fd (0, 2) is a terminal and, if it is, the
	// terminal's session (0 if it cannot be told: not the controlling
	// terminal). Nil asks the kernel.
	Terminal func(fd int) (tty bool, session int)
	Getenv   func(string) string // os.Getenv if nil
}

// maxHops bounds the walk through sessions that sudo or su made: each hop
// reads at most two processes.
const maxHops = 8

// Ask says who runs the command, by the package's rule. It never fails:
// what it cannot read it decides from the terminals alone, and says so.
func (p Probe) Ask() Answer {
	term := p.terminal()
	inTTY, inSID := term(0)
	errTTY, errSID := term(2)
	if !inTTY && !errTTY {
		return Answer{Reason: "automation: no terminal on stdin and stderr"}
	}
	person := func(why string) Answer { return p.person(errTTY, why) }
	self := p.Self
	selfDir := "self"
	if self > 0 {
		selfDir = strconv.Itoa(self)
	}
	me, err := p.read(selfDir)
	if err != nil {
		return person(fmt.Sprintf("a terminal on stdin or stderr; /proc unreadable (%s), so decided from the terminals alone", short(err)))
	}
	sid := me.sid
	switch {
	case inTTY && inSID > 0:
		sid = inSID
	case errTTY && errSID > 0:
		sid = errSID
	}
	var via []string // sudo, su looked through
	for hop := 0; ; hop++ {
		if sid <= 0 || hop == maxHops {
			return person("a terminal on stdin or stderr; its session's leader is out of sight, so decided from the terminals alone")
		}
		lead, err := p.read(strconv.Itoa(sid))
		if err != nil {
			return person(fmt.Sprintf("a terminal on stdin or stderr; its session's leader (pid %d) unreadable (%s), so decided from the terminals alone", sid, short(err)))
		}
		// A session sudo or su made for the command: sudo's monitor
		// leads it (use_pty), its parent is sudo; or su's child (su -c)
		// leads it, under su. The session it was asked from is the one
		// of that sudo's (su's) process, the leader's parent. A sudo
		// that leads a session itself, under no sudo, was started as
		// the session's one command (ssh -t host sudo reboot).
		var parent proc
		if lead.ppid > 1 {
			parent, err = p.read(strconv.Itoa(lead.ppid))
		}
		if lead.ppid > 1 && err == nil && parent.switcher() && parent.sid != sid {
			via = append(via, parent.name())
			sid = parent.sid
			continue
		}
		through := ""
		if len(via) > 0 {
			through = " (looked through the session " + strings.Join(via, ", then ") + " made)"
		}
		if lead.pid == me.pid {
			return Answer{Reason: "automation: the terminal's session was started for this command alone, as ssh -t runs a remote command" + through}
		}
		shell, login, runs := lead.shell()
		switch {
		case lead.switcher():
			return Answer{Reason: fmt.Sprintf("automation: a command run in a session of its own (%s …), as ssh -t runs a remote command%s", lead.name(), through)}
		case runs == "-c":
			return Answer{Reason: fmt.Sprintf("automation: a command run in a session of its own (%s -c), as ssh runs a remote command%s", shell, through)}
		case runs != "":
			return Answer{Reason: fmt.Sprintf("automation: a script run in a session of its own (%s %s), as ssh -t runs a remote command%s", shell, printable(runs), through)}
		case login:
			return person(fmt.Sprintf("a login shell (-%s) leads the terminal's session%s", shell, through))
		case shell != "":
			return person(fmt.Sprintf("an interactive shell (%s) leads the terminal's session%s", shell, through))
		}
		return person(fmt.Sprintf("%s leads the terminal's session, not a shell run for one command%s", printable(lead.name()), through))
	}
}

// short says why a file of /proc could not be read, without its path.
func short(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return err.Error()
}

func orUnset(t string) string {
	if t == "" {
		return "unset"
	}
	return t
}

func (p Probe) getenv(k string) string {
	if p.Getenv == nil {
		return os.Getenv(k)
	}
	return p.Getenv(k)
}

// proc is what Ask reads of a process.
type proc struct {
	pid, ppid, sid int
	comm           string   // the kernel's name (stat's second field)
	argv           []string // its command line
}

// read reads /proc/DIR/stat and /proc/DIR/cmdline.
func (p Probe) read(dir string) (proc, error) {
	root := p.Proc
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, dir, "stat"))
	if err != nil {
		return proc{}, err
	}
	// "pid (comm) state ppid pgrp session …": the name may hold spaces
	// and parentheses, the fields go on after the last ")".
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return proc{}, fmt.Errorf("%s/stat: no command name", dir)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 4 {
		return proc{}, fmt.Errorf("%s/stat: %d fields", dir, len(f)+2)
	}
	var pr proc
	pr.comm = s[open+1 : end]
	pid, err1 := strconv.Atoi(strings.TrimSpace(s[:open]))
	ppid, err2 := strconv.Atoi(f[1])
	sid, err3 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return proc{}, fmt.Errorf("%s/stat: not numbers", dir)
	}
	pr.pid, pr.ppid, pr.sid = pid, ppid, sid
	// A kernel thread or a zombie has an empty command line: the name
	// stands for it.
	if c, err := os.ReadFile(filepath.Join(root, dir, "cmdline")); err == nil && len(c) > 0 {
		pr.argv = strings.Split(strings.TrimRight(string(c), "\x00"), "\x00")
	}
	return pr, nil
}

// name is the process's program name as ps shows it: argv[0]'s base, or
// the kernel's name.
func (pr proc) name() string {
	if len(pr.argv) > 0 && pr.argv[0] != "" {
		return filepath.Base(pr.argv[0])
	}
	return pr.comm
}

// switcher reports whether the process is sudo or su.
func (pr proc) switcher() bool {
	switch strings.TrimPrefix(pr.name(), "-") {
	case "sudo", "su":
		return true
	}
	switch pr.comm {
	case "sudo", "su":
		return true
	}
	return false
}

// shells are the shells told by name; a login shell ("-name") is one
// whatever its name.
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "ash": true, "zsh": true, "ksh": true, "ksh93": true,
	"mksh": true, "lksh": true, "oksh": true, "pdksh": true, "yash": true, "posh": true,
	"fish": true, "tcsh": true, "csh": true, "rbash": true,
}

// shell reports whether the process is a shell (its name, "" if not), a
// login shell (argv[0] "-name", or -l/--login), and what it runs: "" when
// interactive, "-c" for a command (-c among its options), else the script
// it runs (its first operand, unless -s makes the operands arguments).
func (pr proc) shell() (name string, login bool, runs string) {
	argv := pr.argv
	if len(argv) == 0 {
		return "", false, ""
	}
	base := filepath.Base(argv[0])
	if base == "busybox" && len(argv) > 1 { // busybox sh …
		argv = argv[1:]
		base = filepath.Base(argv[0])
	}
	login = strings.HasPrefix(base, "-")
	base = strings.TrimPrefix(base, "-")
	if !login && !shells[base] {
		return "", false, ""
	}
	stdin := false // -s: commands from stdin, the operands are arguments
	operand := func(a string) (string, bool, string) {
		switch {
		case runs != "":
			return base, login, runs
		case stdin:
			return base, login, ""
		}
		return base, login, filepath.Base(a)
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--" && i+1 < len(argv):
			return operand(argv[i+1])
		case a == "--":
			return base, login, runs
		case a == "--login":
			login = true
		case strings.HasPrefix(a, "--"):
			// --noediting, --norc, --rcfile FILE: only a few take an
			// argument; one taken for the first operand ends the scan
			// early, which at worst misses a later -c.
			if a == "--rcfile" || a == "--init-file" {
				i++
			}
		case strings.HasPrefix(a, "-") || strings.HasPrefix(a, "+"):
			opts := a[1:]
			if strings.HasPrefix(a, "-") {
				if strings.ContainsRune(opts, 'c') {
					runs = "-c"
				}
				login = login || strings.ContainsRune(opts, 'l')
				stdin = stdin || strings.ContainsRune(opts, 's')
			}
			// -o NAME, -O NAME (bash's shopt): the name follows.
			if strings.HasSuffix(opts, "o") || strings.HasSuffix(opts, "O") {
				i++
			}
		default:
			return operand(a) // the first operand: options end
		}
	}
	return base, login, runs
}

// printable replaces what must not reach a terminal or a journal line raw
// (control characters: a command line is anyone's text) with '?', and
// cuts a long name.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 40 {
		s = string(r[:39]) + "…"
	}
	return s
}

// kernelTerminal is Probe.Terminal for this process.
func kernelTerminal(fd int) (bool, int) {
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return false, 0
	}
	sid, err := unix.IoctlGetInt(fd, unix.TIOCGSID)
	if err != nil {
		return true, 0
	}
	return true, sid
}
