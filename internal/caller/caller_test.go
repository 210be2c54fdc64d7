package caller

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fp is one process of a fake /proc tree.
type fp struct {
	pid, ppid, sid int
	argv           []string // its command line; its first word's base is its comm
}

// fakeProc writes the processes' stat and cmdline files under a temporary
// directory, as the kernel shows them, and returns it.
func fakeProc(t *testing.T, ps ...fp) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range ps {
		dir := filepath.Join(root, strconv.Itoa(p.pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		comm := strings.TrimPrefix(filepath.Base(p.argv[0]), "-")
		if len(comm) > 15 {
			comm = comm[:15]
		}
		// pid (comm) state ppid pgrp session tty_nr tpgid … (52 fields)
		stat := strconv.Itoa(p.pid) + " (" + comm + ") S " + strconv.Itoa(p.ppid) + " " + strconv.Itoa(p.pid) + " " +
			strconv.Itoa(p.sid) + " 34816 " + strconv.Itoa(p.pid) + strings.Repeat(" 0", 44) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(p.argv, "\x00")+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// ttys answers Probe.Terminal: stdin and stderr terminals of session sid
// (0: not the controlling terminal, the session cannot be told), or none.
func ttys(tty bool, sid int) func(int) (bool, int) {
	return func(int) (bool, int) { return tty, sid }
}

func env(term string) func(string) string {
	return func(k string) string {
		if k == "TERM" {
			return term
		}
		return ""
	}
}

const ansibleCmd = `/bin/sh -c 'echo BECOME-SUCCESS-xqzjtvbnhkkqwhnpsuqyfmwlhvbykkpa ; shutdown -r 0 "Reboot initiated by Ansible"'`

func TestAsk(t *testing.T) {
	sshd := fp{pid: 500, ppid: 1, sid: 500, argv: []string{"sshd: root@pts/0"}}
	cases := []struct {
		name      string
		procs     []fp
		self      int
		tty       bool
		ttySID    int // the terminal's session as TIOCGSID tells; 0 unknown
		term      string
		person    bool
		live      bool
		reason    string
		notReason string
	}{{
		// apt-daily-upgrade.service, dnf-automatic.timer, cron: no
		// terminal at all.
		name:   "unattended-upgrades from its service",
		procs:  []fp{{pid: 900, ppid: 1, sid: 900, argv: []string{"/usr/bin/python3", "/usr/bin/unattended-upgrade"}}, {pid: 950, ppid: 900, sid: 900, argv: []string{"/sbin/shutdown", "-r", "now"}}},
		self:   950,
		reason: "automation: no terminal on stdin and stderr",
	}, {
		name:   "cron",
		procs:  []fp{{pid: 700, ppid: 600, sid: 700, argv: []string{"/bin/sh", "-c", "shutdown -r 03:00"}}, {pid: 701, ppid: 700, sid: 700, argv: []string{"shutdown", "-r", "03:00"}}},
		self:   701,
		reason: "automation: no terminal on stdin and stderr",
	}, {
		// Ansible as root, no become: sshd runs $SHELL -c '…', which
		// gives way to /bin/sh -c '…' (one command), which runs shutdown.
		name: "ansible over ssh -tt without become",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"/bin/sh", "-c", ansibleCmd}},
			{pid: 511, ppid: 510, sid: 510, argv: []string{"shutdown", "-r", "0", "Reboot initiated by Ansible"}}},
		self: 511, tty: true, ttySID: 510, term: "xterm-256color",
		reason: "automation: a command run in a session of its own (sh -c), as ssh runs a remote command",
	}, {
		// Become through sudo, sudo without use_pty: one session.
		name: "ansible over ssh -tt with sudo",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"bash", "-c", "/bin/sh -c 'sudo -H -S -n  -u root /bin/sh -c '\"'\"'echo BECOME-SUCCESS-x ; shutdown -r 0'\"'\"' && sleep 0'"}},
			{pid: 512, ppid: 510, sid: 510, argv: []string{"sudo", "-H", "-S", "-n", "-u", "root", "/bin/sh", "-c", ansibleCmd}},
			{pid: 513, ppid: 512, sid: 510, argv: []string{"/bin/sh", "-c", ansibleCmd}},
			{pid: 514, ppid: 513, sid: 510, argv: []string{"shutdown", "-r", "0", "Reboot initiated by Ansible"}}},
		self: 514, tty: true, ttySID: 510, term: "xterm",
		reason: "automation: a command run in a session of its own (bash -c), as ssh runs a remote command",
	}, {
		// sudo's use_pty: sudo's monitor leads a session of its own on a
		// pty of its own; the session sudo was asked from is sshd's
		// bash -c.
		name: "ansible over ssh -tt with sudo use_pty",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"/bin/sh", "-c", "sudo -H -S -n -u root /bin/sh -c 'echo BECOME-SUCCESS-x ; shutdown -r 0' && sleep 0"}},
			{pid: 512, ppid: 510, sid: 510, argv: []string{"sudo", "-H", "-S", "-n", "-u", "root", "/bin/sh", "-c", ansibleCmd}},
			{pid: 515, ppid: 512, sid: 515, argv: []string{"sudo", "-H", "-S", "-n", "-u", "root", "/bin/sh", "-c", ansibleCmd}},
			{pid: 516, ppid: 515, sid: 515, argv: []string{"/bin/sh", "-c", ansibleCmd}},
			{pid: 517, ppid: 516, sid: 515, argv: []string{"shutdown", "-r", "0", "Reboot initiated by Ansible"}}},
		self: 517, tty: true, ttySID: 515, term: "xterm",
		reason: "automation: a command run in a session of its own (sh -c), as ssh runs a remote command (looked through the session sudo made)",
	}, {
		name: "a person's login shell over ssh",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"-bash"}},
			{pid: 520, ppid: 510, sid: 510, argv: []string{"shutdown", "-r", "+5"}}},
		self: 520, tty: true, ttySID: 510, term: "xterm-256color",
		person: true, live: true,
		reason: "a person at a terminal: a login shell (-bash) leads the terminal's session",
	}, {
		// tmux starts a login shell in each pane; screen an interactive
		// one.
		name: "bash in tmux",
		procs: []fp{{pid: 800, ppid: 1, sid: 800, argv: []string{"tmux", "new", "-s", "work"}},
			{pid: 810, ppid: 800, sid: 810, argv: []string{"-bash"}},
			{pid: 811, ppid: 810, sid: 810, argv: []string{"reboot"}}},
		self: 811, tty: true, ttySID: 810, term: "tmux-256color",
		person: true, live: true,
		reason: "a login shell (-bash) leads",
	}, {
		name: "bash in screen",
		procs: []fp{{pid: 800, ppid: 1, sid: 800, argv: []string{"SCREEN"}},
			{pid: 810, ppid: 800, sid: 810, argv: []string{"/bin/bash"}},
			{pid: 811, ppid: 810, sid: 810, argv: []string{"reboot"}}},
		self: 811, tty: true, ttySID: 810, term: "screen",
		person: true, live: true,
		reason: "an interactive shell (bash) leads the terminal's session",
	}, {
		// sudo's use_pty: the session sudo made is looked through to the
		// person's own.
		name: "sudo reboot from a person, use_pty",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"-bash"}},
			{pid: 530, ppid: 510, sid: 510, argv: []string{"sudo", "reboot"}},
			{pid: 531, ppid: 530, sid: 531, argv: []string{"sudo", "reboot"}},
			{pid: 532, ppid: 531, sid: 531, argv: []string{"reboot"}}},
		self: 532, tty: true, ttySID: 531, term: "xterm",
		person: true, live: true,
		reason: "a login shell (-bash) leads the terminal's session (looked through the session sudo made)",
	}, {
		name: "sudo reboot from a person, no use_pty",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"-bash"}},
			{pid: 530, ppid: 510, sid: 510, argv: []string{"sudo", "reboot"}},
			{pid: 532, ppid: 530, sid: 510, argv: []string{"reboot"}}},
		self: 532, tty: true, ttySID: 510, term: "xterm",
		person: true, live: true,
		reason: "a login shell (-bash) leads the terminal's session",
	}, {
		// su -c puts the command in a session of its own with no
		// controlling terminal: the terminal's session cannot be told,
		// the process's own is su's child's, looked through.
		name: "su -c reboot from a person",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"-bash"}},
			{pid: 540, ppid: 510, sid: 510, argv: []string{"su", "-c", "reboot"}},
			{pid: 541, ppid: 540, sid: 541, argv: []string{"bash", "-c", "reboot"}},
			{pid: 542, ppid: 541, sid: 541, argv: []string{"reboot"}}},
		self: 542, tty: true, term: "xterm",
		person: true, live: true,
		reason: "a login shell (-bash) leads the terminal's session (looked through the session su made)",
	}, {
		// A one-off command over ssh: sshd's bash -c gives way to sudo,
		// which leads the session. Automation by the rule: no shell of
		// the person's waits for it.
		name: "ssh -t host sudo reboot",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"sudo", "reboot"}},
			{pid: 511, ppid: 510, sid: 511, argv: []string{"sudo", "reboot"}},
			{pid: 512, ppid: 511, sid: 511, argv: []string{"reboot"}}},
		self: 512, tty: true, ttySID: 511, term: "xterm",
		reason: "automation: a command run in a session of its own (sudo …), as ssh -t runs a remote command (looked through the session sudo made)",
	}, {
		name: "ssh -t host sudo reboot, no use_pty",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"sudo", "reboot"}},
			{pid: 512, ppid: 510, sid: 510, argv: []string{"reboot"}}},
		self: 512, tty: true, ttySID: 510, term: "xterm",
		reason: "automation: a command run in a session of its own (sudo …), as ssh -t runs a remote command",
	}, {
		// ssh -t host reboot: bash -c gives way to the command, which
		// leads its session.
		name: "ssh -t host reboot",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"reboot"}}},
		self: 510, tty: true, ttySID: 510, term: "xterm",
		reason: "automation: the terminal's session was started for this command alone",
	}, {
		// ssh -t host ./upgrade.sh: bash -c gives way to the script's
		// interpreter, which leads the session.
		name: "a script over ssh -t",
		procs: []fp{sshd,
			{pid: 510, ppid: 500, sid: 510, argv: []string{"/bin/bash", "./upgrade.sh"}},
			{pid: 511, ppid: 510, sid: 510, argv: []string{"shutdown", "-r", "now"}}},
		self: 511, tty: true, ttySID: 510, term: "xterm",
		reason: "automation: a script run in a session of its own (bash upgrade.sh), as ssh -t runs a remote command",
	}, {
		name: "login shell run for one command",
		procs: []fp{{pid: 510, ppid: 1, sid: 510, argv: []string{"-bash", "-lc", "reboot; true"}},
			{pid: 511, ppid: 510, sid: 510, argv: []string{"reboot"}}},
		self: 511, tty: true, ttySID: 510, term: "xterm",
		reason: "automation: a command run in a session of its own (bash -c)",
	}, {
		name: "bash with options before -c",
		procs: []fp{{pid: 510, ppid: 1, sid: 510, argv: []string{"/usr/bin/bash", "-o", "pipefail", "-ec", "reboot; true"}},
			{pid: 511, ppid: 510, sid: 510, argv: []string{"reboot"}}},
		self: 511, tty: true, ttySID: 510, term: "xterm",
		reason: "automation: a command run in a session of its own (bash -c)",
	}, {
		// Emacs's M-x shell: a person at a "dumb" terminal.
		name: "TERM dumb",
		procs: []fp{{pid: 510, ppid: 400, sid: 510, argv: []string{"/bin/bash", "--noediting", "-i"}},
			{pid: 511, ppid: 510, sid: 510, argv: []string{"reboot"}}},
		self: 511, tty: true, ttySID: 510, term: "dumb",
		person: true,
		reason: "a person at a terminal: an interactive shell (bash) leads the terminal's session (TERM dumb: progress lines are plain)",
	}, {
		name: "TERM unset",
		procs: []fp{{pid: 510, ppid: 1, sid: 510, argv: []string{"-sh"}},
			{pid: 511, ppid: 510, sid: 510, argv: []string{"reboot"}}},
		self: 511, tty: true, ttySID: 510,
		person: true,
		reason: "(TERM unset: progress lines are plain)",
	}, {
		name: "something else leads",
		procs: []fp{{pid: 510, ppid: 1, sid: 510, argv: []string{"/usr/bin/nsenter", "-t", "1", "-m", "--", "bash"}},
			{pid: 511, ppid: 510, sid: 510, argv: []string{"bash"}},
			{pid: 512, ppid: 511, sid: 510, argv: []string{"reboot"}}},
		self: 512, tty: true, ttySID: 510, term: "xterm",
		person: true, live: true,
		reason: "a person at a terminal: nsenter leads the terminal's session, not a shell run for one command",
	}, {
		// hidepid, a leader in another PID namespace: decided from the
		// terminals alone, and said so.
		name: "leader out of sight",
		procs: []fp{
			{pid: 511, ppid: 510, sid: 510, argv: []string{"reboot"}}},
		self: 511, tty: true, ttySID: 510, term: "xterm",
		person: true, live: true,
		reason: "its session's leader (pid 510) unreadable",
	}, {
		name: "proc unreadable",
		self: 511, tty: true, ttySID: 510, term: "xterm",
		person: true, live: true,
		reason: "/proc unreadable",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Probe{Proc: fakeProc(t, c.procs...), Self: c.self, Terminal: ttys(c.tty, c.ttySID), Getenv: env(c.term)}
			a := p.Ask()
			if a.Person != c.person || a.Live != c.live || !strings.Contains(a.Reason, c.reason) {
				t.Errorf("got %+v, want person %v live %v, reason with %q", a, c.person, c.live, c.reason)
			}
			if strings.ContainsAny(a.Reason, "\n\r") {
				t.Errorf("reason of several lines: %q", a.Reason)
			}
		})
	}
}

// A terminal on stdin alone (stderr to a file) is enough to look at the
// session; the progress lines on stderr are plain.
func TestAskStdinOnly(t *testing.T) {
	procs := fakeProc(t, fp{pid: 510, ppid: 1, sid: 510, argv: []string{"-bash"}}, fp{pid: 511, ppid: 510, sid: 510, argv: []string{"reboot"}})
	a := Probe{Proc: procs, Self: 511, Getenv: env("xterm"), Terminal: func(fd int) (bool, int) {
		if fd == 0 {
			return true, 510
		}
		return false, 0
	}}.Ask()
	if !a.Person || a.Live || !strings.Contains(a.Reason, "stderr is not a terminal") {
		t.Errorf("%+v", a)
	}
}

// The walk through sessions sudo made is bounded: a loop of them (a
// /proc that lies) ends with the terminals' answer.
func TestAskBounded(t *testing.T) {
	var ps []fp
	for i := 0; i < 40; i++ {
		pid := 1000 + 2*i
		ps = append(ps, fp{pid: pid, ppid: pid + 3, sid: pid, argv: []string{"sudo", "reboot"}},
			fp{pid: pid + 1, ppid: pid, sid: pid, argv: []string{"sudo", "reboot"}})
	}
	ps = append(ps, fp{pid: 5000, ppid: 1001, sid: 1000, argv: []string{"reboot"}})
	a := Probe{Proc: fakeProc(t, ps...), Self: 5000, Terminal: ttys(true, 1000), Getenv: env("xterm")}.Ask()
	if !a.Person || !strings.Contains(a.Reason, "out of sight") {
		t.Errorf("%+v", a)
	}
}

func TestShellOptions(t *testing.T) {
	cases := []struct {
		argv  []string
		name  string
		login bool
		runs  string
	}{
		{[]string{"-bash"}, "bash", true, ""},
		{[]string{"bash", "--login"}, "bash", true, ""},
		{[]string{"/bin/sh", "-c", "x"}, "sh", false, "-c"},
		{[]string{"sh", "-i"}, "sh", false, ""},
		{[]string{"bash", "-O", "extglob", "-c", "x"}, "bash", false, "-c"},
		{[]string{"bash", "--rcfile", "-c", "-i"}, "bash", false, ""},
		{[]string{"/bin/bash", "./upgrade.sh", "-c"}, "bash", false, "upgrade.sh"},
		{[]string{"bash", "-e", "--", "/root/upgrade.sh"}, "bash", false, "upgrade.sh"},
		{[]string{"sh", "-s", "arg"}, "sh", false, ""},
		{[]string{"busybox", "sh", "-c", "x"}, "sh", false, "-c"},
		{[]string{"zsh", "+o", "nomatch", "-c", "x"}, "zsh", false, "-c"},
		{[]string{"python3", "-c", "x"}, "", false, ""},
	}
	for _, c := range cases {
		name, login, runs := proc{argv: c.argv}.shell()
		if name != c.name || login != c.login || runs != c.runs {
			t.Errorf("%q: %q %v %q, want %q %v %q", c.argv, name, login, runs, c.name, c.login, c.runs)
		}
	}
}

// A command name with spaces and parentheses, as the kernel shows it.
func TestReadStat(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "77")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte("77 (a) b (c)) S 12 77 70 34816 77 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, err := Probe{Proc: root}.read("77")
	if err != nil || pr.pid != 77 || pr.ppid != 12 || pr.sid != 70 || pr.comm != "a) b (c)" || pr.name() != "a) b (c)" {
		t.Errorf("%+v %v", pr, err)
	}
}

// A /proc that does not answer (a read of a command line waits for a
// process stuck in the kernel; here a FIFO no one writes) does not hold
// the command: the terminals decide, and the reason says so.
func TestAskWithinStuckProc(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "511")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "stat")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	t.Cleanup(func() {
		// Let the stuck read go.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
	})
	a := Probe{Proc: root, Self: 511, Terminal: ttys(true, 510), Getenv: env("xterm")}.Within(50 * time.Millisecond)
	if !a.Person || !a.Live || !strings.Contains(a.Reason, "/proc did not answer within 50ms, so decided from the terminals alone") {
		t.Errorf("%+v", a)
	}
	a = Probe{Proc: root, Self: 511, Terminal: ttys(false, 0)}.Within(50 * time.Millisecond)
	if a.Person || a.Reason != "automation: no terminal on stdin and stderr" {
		t.Errorf("%+v", a)
	}
}
