// Package install switches shutdown, poweroff, reboot and halt to gnsh
// and back (`gnsh install`, `gnsh uninstall`): the binary, the node
// agent's unit, the example configuration and the man pages, and the four
// commands by a symlink in /usr/local/sbin, an alternatives group or a
// diversion. Every change is made beside the old file and renamed into
// place, printed as one line, recorded in StatePath before it is made
// (forgotten after it is undone), and undone when a later change or the
// record of it fails: the node always has a working reboot, and a run
// interrupted anywhere is finished or undone by the next one.
package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	installfiles "github.com/gnsh/gnsh/install"
	"github.com/gnsh/gnsh/internal/version"
)

// Where the files go.
const (
	DefaultBin  = "/usr/local/sbin/gnsh" // install copies itself here
	PackagedBin = "/usr/sbin/gnsh"       // where the .deb and .rpm put gnsh
	UnitPath    = "/etc/systemd/system/gnsh.service"
	ConfigPath  = "/etc/gnsh/config.yaml"
	ManDir      = "/usr/local/share/man"
	UnitName    = "gnsh.service"
)

// NothingToChange is the whole output of a run that found everything in
// place (Ansible's changed_when looks for it).
const NothingToChange = "gnsh: nothing to change"

// Options are gnsh install's and uninstall's flags and what they run with.
type Options struct {
	Root     string // the target's root: "/" or a mounted image
	Mode     string // symlink, alternatives or divert; "" = as installed, else the family's default
	Bin      string // where gnsh goes ("" = DefaultBin, PackagedBin with Packaged)
	Self     string // the binary to copy ("" = /proc/self/exe)
	Packaged bool   // the package ships the files: switch the commands and enable the unit only
	DryRun   bool   // print what would change, change nothing
	Out      io.Writer
	Tools    Tools
	// Live, when set, says whether systemd runs as PID 1 of the target
	// (then the unit is started and systemd reloaded); nil decides: only
	// for the root "/" with /run/systemd/system present.
	Live *bool

	// Tests: fail makes the step with this description fail; failWrite
	// makes the nth write of the state file fail (n from 1); changed is
	// called after each change to the tree.
	fail      func(desc string) error
	failWrite func(n int) error
	changed   func(what string)
}

// Error is a failure: what went wrong and how to fix it, printed as one line.
type Error struct{ Msg, Fix string }

func (e *Error) Error() string {
	if e.Fix == "" {
		return "gnsh: " + e.Msg
	}
	return "gnsh: " + e.Msg + "; fix: " + e.Fix
}

type step struct {
	desc string
	do   func() error
	undo func() error
	// pre records what do may change, before it runs (install); rec
	// updates the record once do has made the change (uninstall forgets).
	pre func(s *State)
	rec func(s *State)
	// stateDir: the step makes StatePath's directory, so undoing it
	// takes the state file first.
	stateDir bool
	// sweep: the step removes what an interrupted run left (planSweep);
	// these come first, before the run writes anything.
	sweep bool
}

type run struct {
	ctx    context.Context
	o      Options
	t      target
	family string
	id     string
	old    *State // as read (nil: none)
	st     *State // as the steps leave it
	steps  []step
	live   bool
	verb   string // install, uninstall
	// dropState: the state file is removed, not written again.
	dropState bool
	// notes are printed before the steps, when there are any.
	notes []string
	// begin, when set, is recorded before the first step: what the run
	// is about (an install's mode, binary and agent decision).
	begin func(s *State)
	// kept: the state file as the run found it is linked to StatePrev
	// (at the run's first write), to be put back if the run fails.
	kept   bool
	writes int
	lock   *os.File
}

// close releases the lock explicitly: a child forked meanwhile (a tool
// run by another goroutine, in tests) may hold a copy of the descriptor
// until it execs, and with it the lock.
func (r *run) close() {
	syscall.Flock(int(r.lock.Fd()), syscall.LOCK_UN)
	r.lock.Close()
}

func newRun(ctx context.Context, o Options, verb string) (*run, error) {
	if o.Root == "" {
		o.Root = "/"
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	o.Root = root
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, &Error{Msg: fmt.Sprintf("--root %s is not a directory", root), Fix: "mount the image and give its root"}
	}
	if root == "/" && os.Geteuid() != 0 {
		return nil, &Error{Msg: verb + " changes /usr/sbin and /etc and must run as root", Fix: "sudo gnsh " + verb}
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Tools == nil {
		o.Tools = ExecTools{}
	}
	r := &run{ctx: ctx, o: o, t: target{root: root, changed: o.changed}, verb: verb}
	// One install or uninstall at a time per root: a lock on the root
	// directory itself (flock(2) on its descriptor; no file is made).
	lock, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, &Error{Msg: fmt.Sprintf("another gnsh install or uninstall is running on %s (%v)", root, err), Fix: "wait until it is done, then run gnsh " + verb + " again"}
	}
	r.lock = lock
	r.family, r.id = distro(r.t)
	if r.old, err = readState(r.t); err != nil {
		r.close()
		return nil, &Error{Msg: "cannot read what gnsh installed: " + err.Error(), Fix: "repair or remove " + StatePath}
	}
	if o.Live != nil {
		r.live = *o.Live
	} else if root == "/" {
		fi, err := os.Stat("/run/systemd/system")
		r.live = err == nil && fi.IsDir()
	}
	if r.old != nil {
		cp := *r.old
		cp.Commands = append([]Command(nil), r.old.Commands...)
		cp.Files = append([]File(nil), r.old.Files...)
		cp.Links = append([]string(nil), r.old.Links...)
		cp.Dirs = append([]string(nil), r.old.Dirs...)
		r.st = &cp
	} else {
		r.st = &State{Version: 1}
	}
	r.st.Family = r.family
	return r, nil
}

func (r *run) say(format string, a ...any) {
	fmt.Fprintf(r.o.Out, "gnsh: "+format+"\n", a...)
}

func (r *run) add(s ...step) { r.steps = append(r.steps, s...) }

func (r *run) tool(argv ...string) error {
	err := r.o.Tools.Run(r.ctx, argv...)
	r.t.done("ran " + strings.Join(argv, " "))
	return err
}

// execute runs the steps in order, printing each one done. When one fails
// (or the record of one cannot be written) the ones done, that one among
// them, are undone in reverse order and the state file is put back as the
// run found it.
func (r *run) execute() error {
	if len(r.steps) == 0 {
		fmt.Fprintln(r.o.Out, NothingToChange)
		return nil
	}
	for _, n := range r.notes {
		r.say("note: %s", n)
	}
	if r.o.DryRun {
		for _, s := range r.steps {
			r.say("dry run, not done: %s", s.desc)
		}
		return nil
	}
	var done []step
	for _, s := range r.steps {
		if r.begin != nil && !s.sweep {
			r.begin(r.st)
			r.begin = nil
			if err := r.saveState(); err != nil {
				return r.rollback(done, "", &stateError{err: err, before: true})
			}
		}
		if s.pre != nil {
			s.pre(r.st)
			if err := r.saveState(); err != nil {
				return r.rollback(done, s.desc, &stateError{err: err, before: true})
			}
		}
		var err error
		if r.o.fail != nil {
			err = r.o.fail(s.desc)
		}
		if err == nil {
			err = s.do()
		}
		skipped := errors.Is(err, errSkip)
		if skipped {
			err = nil
		}
		if err != nil {
			return r.rollback(done, s.desc, err)
		}
		if !skipped {
			r.say("%s", s.desc)
			done = append(done, s)
		}
		if s.rec != nil {
			s.rec(r.st)
			if err := r.saveState(); err != nil {
				return r.rollback(done, s.desc, &stateError{err: err})
			}
		}
	}
	if r.kept {
		r.kept = false
		if err := ignoreMissing(r.t.remove(StatePrev)); err != nil {
			r.say("warning: cannot remove %s: %v", StatePrev, err)
		}
	}
	return nil
}

// stateError is a failed write of the state file, before the step (what
// it may change) or after it (what it undid).
type stateError struct {
	err    error
	before bool
}

func (e *stateError) Error() string { return e.err.Error() }

// reason is the system's answer without the host path the message names
// already (ENOSPC, EIO, EROFS).
func (e *stateError) reason() error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(e.err, &pe):
		return pe.Err
	case errors.As(e.err, &le):
		return le.Err
	}
	return e.err
}

// saveState writes the state as the steps so far left it, once its
// directory is there, so that an interrupted run can be finished or undone.
func (r *run) saveState() error {
	if r.dropState || !r.t.exists(filepath.Dir(StatePath)) {
		return nil
	}
	if r.old != nil && !r.kept && r.t.exists(StatePath) {
		// The record as the run found it, kept for a rollback that cannot
		// write (a full or read-only /var): a rename puts it back.
		if err := r.t.link(StatePath, StatePrev); err != nil {
			return err
		}
		r.kept = true
	}
	r.writes++
	if r.o.failWrite != nil {
		if err := r.o.failWrite(r.writes); err != nil {
			return err
		}
	}
	if r.st.empty() {
		if r.t.exists(StatePath) {
			return r.t.remove(StatePath)
		}
		return nil
	}
	return writeState(r.t, r.st)
}

func (s *State) empty() bool {
	return s.Mode == "" && len(s.Commands) == 0 && len(s.Files) == 0 && len(s.Links) == 0 && len(s.Dirs) == 0
}

// putBackState makes the state file what the run found: the kept link
// renamed back, else (there was none) removed.
func (r *run) putBackState() error {
	if r.kept {
		r.kept = false
		return r.t.restore(StatePrev, StatePath)
	}
	if r.old == nil && r.t.exists(StatePath) {
		return r.t.remove(StatePath)
	}
	return nil
}

func (r *run) rollback(done []step, failed string, cause error) error {
	var stateErr error
	stateBack := false
	putBack := func() {
		if !stateBack {
			stateBack = true
			stateErr = r.putBackState()
		}
	}
	var undoErrs []string
	for i := len(done) - 1; i >= 0; i-- {
		s := done[i]
		if s.stateDir {
			putBack() // the state file first: its directory goes now
		}
		if s.undo == nil {
			continue
		}
		if err := s.undo(); err != nil {
			undoErrs = append(undoErrs, fmt.Sprintf("%s: %v", s.desc, err))
			r.say("cannot undo %q: %v", s.desc, err)
			continue
		}
		r.say("undone: %s", s.desc)
	}
	putBack()
	if stateErr != nil {
		undoErrs = append(undoErrs, fmt.Sprintf("putting %s back: %v", StatePath, stateErr))
	}
	var se *stateError
	if errors.As(cause, &se) {
		fix := "make " + filepath.Dir(StatePath) + " writable (free space, remount read-write), then run gnsh " + r.verb + " again"
		if failed == "" {
			return &Error{Msg: fmt.Sprintf("%s changed nothing: cannot write %s (%v)", r.verb, StatePath, se.reason()), Fix: fix}
		}
		when := "after"
		if se.before {
			when = "before"
		}
		msg := fmt.Sprintf("%s stopped %s %q: cannot write %s (%v)", r.verb, when, failed, StatePath, se.reason())
		if len(undoErrs) > 0 {
			return &Error{Msg: msg + ", and undoing the changes failed too (" + strings.Join(undoErrs, "; ") + ")",
				Fix: fix + " (each change above is printed)"}
		}
		return &Error{Msg: msg + "; every change was undone", Fix: fix}
	}
	if len(undoErrs) > 0 {
		return &Error{Msg: fmt.Sprintf("%s stopped at %q (%v), and undoing the changes before it failed too (%s)",
			r.verb, failed, cause, strings.Join(undoErrs, "; ")),
			Fix: "fix the causes, then run gnsh " + r.verb + " again (each change above is printed)"}
	}
	var e *Error
	if errors.As(cause, &e) {
		return &Error{Msg: fmt.Sprintf("%s stopped at %q: %s; every change before it was undone", r.verb, failed, e.Msg), Fix: e.Fix}
	}
	return &Error{Msg: fmt.Sprintf("%s stopped at %q: %v; every change before it was undone", r.verb, failed, cause),
		Fix: "fix that, then run gnsh " + r.verb + " again"}
}

// mkdirs adds a step per missing directory of p.
func (r *run) mkdirs(p string) {
	for _, d := range r.t.missingDirs(p) {
		if r.planned("created directory " + d) {
			continue
		}
		d := d
		r.add(step{desc: "created directory " + d, stateDir: d == filepath.Dir(StatePath),
			do:   func() error { return r.t.mkdir(d) },
			undo: func() error { return r.t.remove(d) },
			pre: func(s *State) {
				if !s.hasDir(d) {
					s.Dirs = append(s.Dirs, d)
				}
			}})
	}
}

func (r *run) planned(desc string) bool {
	for _, s := range r.steps {
		if s.desc == desc {
			return true
		}
	}
	return false
}

// Install switches the commands to gnsh as o says.
func Install(ctx context.Context, o Options) error {
	r, err := newRun(ctx, o, "install")
	if err != nil {
		return err
	}
	defer r.close()
	mode := o.Mode
	switch {
	case mode != "":
	case r.old != nil && r.old.Mode != "":
		mode = r.old.Mode
	default:
		mode = DefaultMode(r.family)
	}
	switch mode {
	case ModeSymlink:
		r.say("warning: --mode symlink puts links in /usr/local/sbin, which only a PATH lookup finds: sudo's " +
			"secure_path without /usr/local/sbin (RHEL's default), absolute paths (/sbin/reboot, /usr/sbin/shutdown) " +
			"and Ansible's reboot module bypass gnsh; --mode divert switches the commands themselves")
		if o.Mode == "" && r.family == Unknown {
			r.say("warning: unknown distribution (ID=%s in /etc/os-release): neither dpkg nor rpm, so --mode symlink", r.id)
		}
	case ModeDivert, ModeAlternatives:
		if r.family == Unknown {
			return &Error{Msg: fmt.Sprintf("--mode %s needs dpkg (Debian, Ubuntu) or rpm (the RHEL family), and /etc/os-release says ID=%s", mode, r.id),
				Fix: "use --mode symlink"}
		}
	default:
		return &Error{Msg: fmt.Sprintf("unknown --mode %q", mode), Fix: "use --mode symlink, alternatives or divert"}
	}
	bin := o.Bin
	if bin == "" {
		bin = DefaultBin
		if o.Packaged {
			bin = PackagedBin
		}
	}
	if !filepath.IsAbs(bin) {
		return &Error{Msg: fmt.Sprintf("--bin %s is not an absolute path", bin), Fix: "give it as /usr/local/sbin/gnsh"}
	}
	r.planSweep()
	if err := r.planInstall(mode, bin); err != nil {
		return err
	}
	// Recorded before the first step: a run interrupted later is finished
	// in this mode (a command found in another is switched over) and
	// with this decision about the agent.
	agent, left := r.agent(), r.leftStateDir()
	r.begin = func(s *State) {
		s.Mode, s.Bin, s.Packaged, s.Agent = mode, bin, o.Packaged, agent
		if left {
			s.Dirs = append(s.Dirs, filepath.Dir(StatePath))
		}
	}
	return r.execute()
}

// planSweep removes what an interrupted run left beside the paths the
// record names: a file made under its temporary name and not yet renamed
// into place, the state file as that run found it.
func (r *run) planSweep() {
	paths := []string{StatePath, StatePrev}
	if r.old != nil {
		for _, c := range r.old.Commands {
			paths = append(paths, c.Path, c.Saved)
		}
		for _, f := range r.old.Files {
			paths = append(paths, f.Path, f.Saved)
		}
		paths = append(paths, r.old.Links...)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		for _, x := range []string{p, tmpName(p)} {
			if p == "" || seen[x] || (x == p && p != StatePrev) {
				continue
			}
			seen[x] = true
			if fi, err := r.t.lstat(x); err != nil || fi.IsDir() {
				continue
			}
			r.add(step{desc: fmt.Sprintf("removed %s (left by an interrupted gnsh run)", x), sweep: true,
				do: func() error { return ignoreMissing(r.t.remove(x)) }})
		}
	}
}

// leftStateDir says whether StatePath's directory is there, unrecorded,
// and holds nothing but what planSweep removes: made by a first install
// interrupted before it could write the record into it (only gnsh makes
// it; a mount point is not taken).
func (r *run) leftStateDir() bool {
	d := filepath.Dir(StatePath)
	fi, err := r.t.lstat(d)
	if r.old != nil || err != nil || !fi.IsDir() {
		return false
	}
	up, err := r.t.lstat(filepath.Dir(d))
	if err != nil || fi.Sys().(*syscall.Stat_t).Dev != up.Sys().(*syscall.Stat_t).Dev {
		return false
	}
	h, err := r.t.host(d)
	if err != nil {
		return false
	}
	ents, err := os.ReadDir(h)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if p := filepath.Join(d, e.Name()); p != tmpName(StatePath) && p != StatePrev && p != tmpName(StatePrev) {
			return false
		}
	}
	return true
}

// unitDirs are where a gnsh.service is looked for (systemd's order).
var unitDirs = []string{"/etc/systemd/system/", "/run/systemd/system/", "/usr/lib/systemd/system/", "/lib/systemd/system/"}

// agent decides what this install does to the node agent: AgentEnable
// (enable it, and start it when systemd runs the target) on a first
// install only: no record, and no gnsh.service anywhere (the package's,
// one the Ansible role or an admin put, a mask). Afterwards, AgentKept:
// whether it is enabled, disabled or masked, and runs, is the admin's.
func (r *run) agent() string {
	if r.old != nil {
		if r.old.Agent == AgentEnable {
			return AgentEnable // a first install, interrupted
		}
		return AgentKept
	}
	for _, d := range unitDirs {
		if r.t.exists(d + UnitName) {
			return AgentKept
		}
	}
	return AgentEnable
}

// mask returns the path of a mask of gnsh.service (a link to /dev/null in
// /etc/systemd/system or /run/systemd/system), "" when there is none.
func (r *run) mask() string {
	for _, d := range unitDirs[:2] {
		if l, _ := r.t.readlink(d + UnitName); l == "/dev/null" {
			return d + UnitName
		}
	}
	return ""
}

func (r *run) planInstall(mode, bin string) error {
	o := r.o
	r.mkdirs(StatePath)
	unitPath := UnitPath
	var unit []byte
	binChanged, unitChanged := false, false
	mask := r.mask()
	if o.Packaged {
		if fi, err := r.t.lstat(bin); err != nil || fi.IsDir() {
			return &Error{Msg: fmt.Sprintf("--packaged: %s is %s", bin, describe(r.t, bin)), Fix: "install the gnsh package (it ships " + bin + "), or drop --packaged"}
		}
		unitPath = ""
		for _, p := range []string{UnitPath, "/usr/lib/systemd/system/" + UnitName, "/lib/systemd/system/" + UnitName} {
			if r.t.exists(p) && p != mask {
				unitPath = p
				break
			}
		}
		if unitPath == "" {
			return &Error{Msg: "--packaged: no " + UnitName + " in /etc/systemd/system, /usr/lib/systemd/system or /lib/systemd/system", Fix: "install the gnsh package, or drop --packaged"}
		}
		data, err := r.t.readFile(unitPath)
		if err != nil {
			return &Error{Msg: "cannot read " + unitPath + ": " + err.Error(), Fix: "reinstall the gnsh package"}
		}
		unit = data
	} else {
		self, err := r.readSelf()
		if err != nil {
			return err
		}
		binChanged = r.planFile(bin, self, 0o755, false)
		unit = unitText(bin)
		if mask == UnitPath {
			r.notes = append(r.notes, fmt.Sprintf("%s is masked (%s is a link to /dev/null): its unit is not written over the mask, "+
				"and the node agent is neither enabled nor started", UnitName, mask))
		} else {
			unitChanged = r.planFile(UnitPath, unit, 0o644, false)
		}
		if !r.t.exists(ConfigPath) {
			r.planFile(ConfigPath, installfiles.Config(), 0o644, true)
		}
		if err := r.planMan(); err != nil {
			return err
		}
	}
	if err := r.planCommands(mode, bin); err != nil {
		return err
	}
	// The agent is enabled and started by a first install only; later
	// runs restart it when it runs and its binary or unit changed.
	enable := r.agent() == AgentEnable && mask == ""
	if enable && r.planLinks(unitPath, unit) {
		unitChanged = true
	}
	if r.live {
		if unitChanged {
			r.add(step{desc: "reloaded systemd (systemctl daemon-reload)",
				do: func() error { return r.tool("systemctl", "daemon-reload") }})
		}
		active := r.tool("systemctl", "is-active", "--quiet", UnitName) == nil
		switch {
		case !active && enable:
			r.add(step{desc: "started " + UnitName,
				do:   func() error { return r.tool("systemctl", "start", UnitName) },
				undo: func() error { return r.tool("systemctl", "stop", UnitName) }})
		case active && (binChanged || unitChanged):
			r.add(step{desc: "restarted " + UnitName + " (a new gnsh or unit)",
				do: func() error { return r.tool("systemctl", "restart", UnitName) }})
		}
	}
	if len(r.steps) > 0 || r.old != nil && r.old.Agent == AgentEnable {
		r.add(step{desc: "recorded the installation in " + StatePath, do: func() error { return nil },
			pre: func(s *State) { s.Mode, s.Bin, s.Packaged, s.Agent = mode, bin, r.o.Packaged, AgentKept }})
	}
	return nil
}

func (r *run) readSelf() ([]byte, error) {
	self := r.o.Self
	if self == "" {
		self = "/proc/self/exe"
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return nil, &Error{Msg: "cannot read this gnsh binary: " + err.Error(), Fix: "run gnsh install from a readable gnsh binary"}
	}
	return data, nil
}

// unitText is install/systemd/gnsh.service, its ExecStart naming bin.
func unitText(bin string) []byte {
	u := installfiles.Unit()
	if bin == DefaultBin {
		return u
	}
	return bytes.ReplaceAll(u, []byte("ExecStart="+DefaultBin+" "), []byte("ExecStart="+bin+" "))
}

// planFile adds the steps that make p hold data with mode perm: nothing
// when it does already; a file found that install did not write is kept
// beside it as p.gnsh-orig and put back by uninstall. keep marks the
// configuration: uninstall leaves it when edited. It says whether p changes.
func (r *run) planFile(p string, data []byte, perm fs.FileMode, keep bool) bool {
	cur, err := r.t.readFile(p)
	fi, _ := r.t.lstat(p)
	prev := r.st.file(p)
	if err == nil && bytes.Equal(cur, data) && fi.Mode().Perm() == perm {
		if saved := p + origSuffix; prev == nil && r.t.exists(saved) {
			// Written by an earlier run that did not record it.
			r.add(step{desc: fmt.Sprintf("recorded %s, the file found there before kept as %s (made by an earlier gnsh run, not recorded)", p, saved),
				do:  func() error { return nil },
				pre: func(s *State) { s.Files = append(s.Files, File{Path: p, Saved: saved, Keep: keep, Sum: sum(data)}) }})
		}
		return false
	}
	r.mkdirs(p)
	saved := ""
	if prev != nil {
		saved = prev.Saved
	}
	desc := "installed " + p
	var prevData []byte
	var prevMode fs.FileMode
	newSaved := false
	switch {
	case fi == nil:
	case prev == nil:
		saved, newSaved = p+origSuffix, true
	case saved != "" && (r.t.sameFile(saved, p) || !r.t.exists(saved) && !prev.wrote(cur)):
		// An interrupted install recorded p but did not replace it: the
		// file there is still the one it found (kept, or not yet).
		newSaved = true
	default:
		desc = "updated " + p
		prevData, prevMode = cur, fi.Mode().Perm()
	}
	if newSaved {
		desc = fmt.Sprintf("installed %s (the file found there kept as %s)", p, saved)
	}
	sm := sum(data)
	r.add(step{desc: desc,
		do: func() error {
			if newSaved {
				if err := r.t.link(p, saved); err != nil {
					return err
				}
			}
			return r.t.writeFile(p, data, perm)
		},
		undo: func() error {
			switch {
			case newSaved:
				return r.t.restore(saved, p)
			case prevData != nil:
				return r.t.writeFile(p, prevData, prevMode)
			}
			return r.t.remove(p)
		},
		pre: func(s *State) {
			f := s.file(p)
			if f == nil {
				s.Files = append(s.Files, File{Path: p, Saved: saved, Keep: keep})
				f = &s.Files[len(s.Files)-1]
			}
			f.Sum = sm
		}})
	return true
}

func (r *run) planMan() error {
	pages, err := installfiles.ManPages(version.Version)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(pages))
	for name := range pages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sec := strings.TrimPrefix(filepath.Ext(name), ".")
		if sec == "" {
			continue
		}
		r.planFile(filepath.Join(ManDir, "man"+sec[:1], name), pages[name], 0o644, false)
	}
	return nil
}

// wantedBy returns the WantedBy= targets of a unit's [Install] section.
func wantedBy(unit []byte) []string {
	var out []string
	section := ""
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if v, ok := strings.CutPrefix(line, "WantedBy="); ok && section == "[Install]" {
			out = append(out, strings.Fields(v)...)
		}
	}
	return out
}

// planLinks enables the unit as systemctl enable does, by a link in each
// WantedBy= target's .wants directory (systemctl is not asked: with
// --root there is no systemd to ask, and the links are all it would make).
func (r *run) planLinks(unitPath string, unit []byte) bool {
	changed := false
	for _, tg := range wantedBy(unit) {
		l := "/etc/systemd/system/" + tg + ".wants/" + UnitName
		if cur, _ := r.t.readlink(l); cur == unitPath {
			continue
		}
		r.mkdirs(l)
		existed := r.t.exists(l)
		r.add(step{desc: fmt.Sprintf("enabled %s (linked %s to %s)", UnitName, l, unitPath),
			do: func() error { return r.t.symlink(unitPath, l) },
			undo: func() error {
				if existed {
					return nil
				}
				return r.t.remove(l)
			},
			pre: func(s *State) {
				for _, x := range s.Links {
					if x == l {
						return
					}
				}
				s.Links = append(s.Links, l)
			}})
		changed = true
	}
	return changed
}

// Uninstall undoes what StatePath says install did. With Packaged only
// the commands and the unit's enablement (the package removes its files).
func Uninstall(ctx context.Context, o Options) error {
	r, err := newRun(ctx, o, "uninstall")
	if err != nil {
		return err
	}
	defer r.close()
	r.planSweep()
	if r.old == nil {
		if d := filepath.Dir(StatePath); r.leftStateDir() {
			r.add(step{desc: "removed directory " + d + " (left by an interrupted gnsh install)",
				do: func() error { return r.t.remove(d) }, undo: func() error { return r.t.mkdir(d) }})
		}
		return r.execute()
	}
	old := r.old
	if r.live && (len(old.Links) > 0 || len(old.Files) > 0) && r.tool("systemctl", "is-active", "--quiet", UnitName) == nil {
		r.add(step{desc: "stopped " + UnitName,
			do:   func() error { return r.tool("systemctl", "stop", UnitName) },
			undo: func() error { return r.tool("systemctl", "start", UnitName) }})
	}
	unitChanged := false
	for _, l := range old.Links {
		l := l
		target, _ := r.t.readlink(l)
		unitChanged = true
		r.add(step{desc: fmt.Sprintf("disabled %s (removed %s)", UnitName, l),
			do: func() error {
				if err := r.t.remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				return nil
			},
			undo: func() error {
				if target == "" {
					return nil
				}
				return r.t.symlink(target, l)
			},
			rec: func(s *State) { s.Links = remove(s.Links, l) }})
	}
	if err := r.planUndoCommands(old); err != nil {
		return err
	}
	if !o.Packaged {
		for i := len(old.Files) - 1; i >= 0; i-- {
			if r.planRemoveFile(old.Files[i]) && strings.HasPrefix(old.Files[i].Path, "/etc/systemd/") {
				unitChanged = true
			}
		}
	}
	if r.live && unitChanged {
		r.add(step{desc: "reloaded systemd (systemctl daemon-reload)",
			do: func() error { return r.tool("systemctl", "daemon-reload") }})
	}
	// --packaged leaves the files a plain install copied, and their record.
	keepState := o.Packaged && len(old.Files) > 0
	if len(r.steps) == 0 && keepState {
		fmt.Fprintln(r.o.Out, NothingToChange)
		return nil
	}
	if !o.Packaged {
		// An install after this uninstall, even an interrupted one, is a
		// first one (the package's scripts decide for the package).
		r.begin = func(s *State) { s.Agent = AgentEnable }
	}
	rmDir := func(d string) {
		r.add(step{desc: "removed directory " + d,
			do: func() error {
				err := r.t.remove(d)
				if err != nil && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY)) {
					return errSkip
				}
				return err
			},
			undo: func() error { return r.t.mkdir(d) },
			rec:  func(s *State) { s.Dirs = remove(s.Dirs, d) }})
	}
	stateDir := false
	if !keepState {
		// Innermost first, recorded as they go; the record's own last.
		for i := len(old.Dirs) - 1; i >= 0; i-- {
			if d := old.Dirs[i]; d == filepath.Dir(StatePath) {
				stateDir = true
			} else {
				rmDir(d)
			}
		}
	}
	desc := "removed the record " + StatePath
	if keepState {
		desc = "updated the record " + StatePath + " (the files gnsh install copied stay listed)"
	}
	r.add(step{desc: desc,
		do: func() error {
			if keepState {
				return nil
			}
			r.dropState = true
			if err := r.t.remove(StatePath); err != nil {
				return err
			}
			if r.kept { // its directory goes next
				if err := ignoreMissing(r.t.remove(StatePrev)); err != nil {
					return err // a rollback renames it back
				}
				r.kept = false
			}
			return nil
		},
		undo: func() error { r.dropState = false; return writeState(r.t, old) },
		rec: func(s *State) {
			s.Mode, s.Bin, s.Packaged = "", "", false
			if !o.Packaged {
				s.Files = nil
			}
		}})
	if stateDir {
		rmDir(filepath.Dir(StatePath))
	}
	return r.execute()
}

// errSkip from a step's do: nothing was there to change (a directory
// not removed because it is not empty); the step is not printed.
var errSkip = errors.New("skipped")

func remove(list []string, x string) []string {
	var out []string
	for _, v := range list {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// planRemoveFile removes a file install wrote, or puts back the one it
// found there; the configuration stays when edited. What is there but is
// not install's (a mask linked in place of the unit, the original an
// interrupted install did not replace) is left.
func (r *run) planRemoveFile(f File) bool {
	cur, err := r.t.readFile(f.Path)
	fi, _ := r.t.lstat(f.Path)
	forget := func(why string) {
		r.add(step{desc: fmt.Sprintf("forgot %s (%s)", f.Path, why), do: func() error { return nil },
			rec: func(s *State) { s.Files = removeFile(s.Files, f.Path) }})
	}
	saved := f.Saved != "" && r.t.exists(f.Saved)
	switch {
	case saved && r.t.sameFile(f.Saved, f.Path):
		r.add(step{desc: fmt.Sprintf("removed %s (the same file as %s: an interrupted install kept it, and replaced nothing)", f.Saved, f.Path),
			do:   func() error { return r.t.remove(f.Saved) },
			undo: func() error { return r.t.link(f.Path, f.Saved) },
			rec:  func(s *State) { s.Files = removeFile(s.Files, f.Path) }})
		return true
	case f.Saved != "" && !saved && fi == nil:
		forget("already gone, and the file found there before gnsh install too")
		return true
	case f.Saved != "" && !saved && !f.wrote(cur):
		forget("what is there is the file found there before gnsh install")
		return true
	case f.Saved != "" && !saved:
		r.add(step{desc: "restore " + f.Path, do: func() error {
			return &Error{Msg: fmt.Sprintf("%s, the file found at %s before gnsh install, is missing", f.Saved, f.Path),
				Fix: "put it back, or remove " + f.Path + " by hand and run gnsh uninstall again"}
		}})
		return true
	case fi == nil && !saved:
		forget("already gone")
		return true
	case f.Keep && err == nil && !bytes.Equal(cur, installfiles.Config()):
		r.say("kept %s: it was edited (remove it by hand if it is no longer wanted)", f.Path)
		return false
	case !saved && !fi.Mode().IsRegular():
		forget("left as it is: " + describe(r.t, f.Path) + ", not the file gnsh install wrote")
		return true
	}
	var mode fs.FileMode
	if fi != nil {
		mode = fi.Mode().Perm()
	}
	if saved {
		r.add(step{desc: fmt.Sprintf("restored %s from %s", f.Path, f.Saved),
			do: func() error { return r.t.rename(f.Saved, f.Path) },
			undo: func() error {
				if fi == nil {
					return r.t.rename(f.Path, f.Saved)
				}
				if err := r.t.link(f.Path, f.Saved); err != nil {
					return err
				}
				return r.t.writeFile(f.Path, cur, mode)
			},
			rec: func(s *State) { s.Files = removeFile(s.Files, f.Path) }})
		return true
	}
	r.add(step{desc: "removed " + f.Path,
		do:   func() error { return r.t.remove(f.Path) },
		undo: func() error { return r.t.writeFile(f.Path, cur, mode) },
		rec:  func(s *State) { s.Files = removeFile(s.Files, f.Path) }})
	return true
}

func removeFile(list []File, p string) []File {
	var out []File
	for _, f := range list {
		if f.Path != p {
			out = append(out, f)
		}
	}
	return out
}
