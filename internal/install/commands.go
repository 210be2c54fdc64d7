package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gnsh/gnsh/internal/nodefacts"
)

// The package name gnsh's dpkg diversions are made for, so that the gnsh
// .deb's maintainer scripts and `dpkg-divert --list gnsh` find them.
const divertPackage = "gnsh"

// Suffixes of the originals' names: a dpkg diversion's (as molly-guard and
// others name theirs) and a replaced original's.
const (
	distribSuffix = ".distrib"
	origSuffix    = ".gnsh-orig"
)

type diversion struct{ to, pkg string }

// diversions reads dpkg's diversions: three lines each, the path, where
// it is diverted to and the package (":" for a local one).
func (r *run) diversions() (map[string]diversion, error) {
	m := map[string]diversion{}
	data, err := r.t.readFile("/var/lib/dpkg/diversions")
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := 0; i+2 < len(lines); i += 3 {
		m[lines[i]] = diversion{to: lines[i+1], pkg: lines[i+2]}
	}
	return m, nil
}

// dpkgPaths returns the path of each command as the package that owns it
// ships it (/sbin/reboot in Debian 11 and 12's systemd-sysv, /usr/sbin/…
// on newer systems): a diversion must name that path, since dpkg knows no
// merged-/usr aliases. An unowned command gets /usr/sbin/NAME.
func (r *run) dpkgPaths() map[string]string {
	want := map[string]string{}
	for _, n := range nodefacts.LegacyCommands {
		want["/sbin/"+n], want["/usr/sbin/"+n] = n, n
	}
	paths := map[string]string{}
	if h, err := r.t.host("/var/lib/dpkg/info/x"); err == nil {
		lists, _ := filepath.Glob(filepath.Join(filepath.Dir(h), "*.list"))
		for _, l := range lists {
			data, err := os.ReadFile(l)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				if n, ok := want[line]; ok && paths[n] == "" {
					paths[n] = line
				}
			}
		}
	}
	for _, n := range nodefacts.LegacyCommands {
		if paths[n] == "" {
			paths[n] = "/usr/sbin/" + n
		}
	}
	return paths
}

func alias(p string) string {
	if rest, ok := strings.CutPrefix(p, "/usr/sbin/"); ok {
		return "/sbin/" + rest
	}
	return "/usr" + p
}

func (r *run) withRoot(tool string, args ...string) []string {
	argv := []string{tool}
	if r.t.root != "/" {
		argv = append(argv, "--root", r.t.root)
	}
	return append(argv, args...)
}

func (r *run) dpkgDivert(args ...string) error {
	return r.tool(r.withRoot("dpkg-divert", append([]string{"--package", divertPackage, "--no-rename"}, args...)...)...)
}

// alternatives runs the family's alternatives tool: Debian's
// update-alternatives takes --root; RHEL's alternatives (chkconfig) has no
// such option and runs chrooted into a --root image.
func (r *run) alternatives(args ...string) error {
	if r.family == Debian {
		return r.tool(r.withRoot("update-alternatives", args...)...)
	}
	if r.t.root != "/" {
		return r.tool(append([]string{"chroot", r.t.root, "alternatives"}, args...)...)
	}
	return r.tool(append([]string{"alternatives"}, args...)...)
}

func (r *run) altAdmin(name string) string {
	if r.family == Debian {
		return "/var/lib/dpkg/alternatives/" + name
	}
	return "/var/lib/alternatives/" + name
}

// altChoices returns the lines of the alternatives group's admin file (its
// choices' paths among them).
func (r *run) altChoices(name string) map[string]bool {
	m := map[string]bool{}
	data, err := r.t.readFile(r.altAdmin(name))
	if err != nil {
		return m
	}
	for _, l := range strings.Split(string(data), "\n") {
		m[l] = true
	}
	return m
}

func setCommand(s *State, name string, f func(c *Command)) {
	c := s.command(name)
	if c == nil {
		s.Commands = append(s.Commands, Command{Name: name})
		c = &s.Commands[len(s.Commands)-1]
	}
	f(c)
}

func dropCommand(s *State, name string) {
	var out []Command
	for _, c := range s.Commands {
		if c.Name != name {
			out = append(out, c)
		}
	}
	s.Commands = out
}

func ignoreMissing(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// kind is the mode a recorded command is switched in.
func kind(c Command) string {
	switch {
	case c.Alternatives:
		return ModeAlternatives
	case strings.HasPrefix(c.Path, "/usr/local/sbin/"):
		return ModeSymlink
	}
	return ModeDivert
}

func (r *run) oldCommand(name string) *Command {
	if r.old == nil {
		return nil
	}
	return r.old.command(name)
}

// planCommands switches the four commands to bin in mode; a command
// recorded in another mode (all of them after --mode, some after an
// interrupted switch) is undone first.
func (r *run) planCommands(mode, bin string) error {
	var divs map[string]diversion
	var paths map[string]string
	if r.family == Debian {
		var err error
		if divs, err = r.diversions(); err != nil {
			return &Error{Msg: "cannot read dpkg's diversions: " + err.Error(), Fix: "check /var/lib/dpkg/diversions"}
		}
		paths = r.dpkgPaths()
	}
	for _, name := range nodefacts.LegacyCommands {
		// fresh: the command's path holds (once the old mode is undone)
		// the original, whatever is there now.
		fresh := false
		if c := r.oldCommand(name); c != nil && kind(*c) != mode {
			if err := r.planUndoCommand(*c, r.old.Bin, divs); err != nil {
				return err
			}
			fresh = kind(*c) != ModeSymlink && mode != ModeSymlink
		}
		var err error
		switch {
		case mode == ModeSymlink:
			r.planReplace(name, "/usr/local/sbin/"+name, bin, false)
		case mode == ModeDivert && r.family == Debian:
			p := paths[name]
			if err = r.planDiversion(name, p, fresh, divs); err == nil {
				r.planLink(name, p, p+distribSuffix, bin, fresh)
			}
		case mode == ModeDivert:
			r.planReplace(name, "/usr/sbin/"+name, bin, fresh)
		case r.family == Debian: // alternatives
			p := paths[name]
			if err = r.planDiversion(name, p, fresh, divs); err == nil {
				err = r.planAlternatives(name, p, p+distribSuffix, bin, fresh)
			}
		default:
			p := "/usr/sbin/" + name
			err = r.planAlternatives(name, p, p+origSuffix, bin, fresh)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// recordFound records what the tree shows gnsh made for a command and
// the record lacks (a run of an older gnsh interrupted before it wrote
// it, a lost record), so that uninstall undoes it: a step of its own,
// changing nothing else.
func (r *run) recordFound(name, what string, found Command) {
	if c := r.oldCommand(name); c != nil && c.Path == found.Path && (found.Saved == "" || c.Saved == found.Saved) &&
		(c.Diverted || !found.Diverted) && (c.Alternatives || !found.Alternatives) {
		return
	}
	r.add(step{desc: "recorded " + what + " (made by an earlier gnsh run, not recorded)", do: func() error { return nil },
		pre: func(st *State) {
			setCommand(st, name, func(c *Command) {
				c.Path = found.Path
				if found.Saved != "" {
					c.Saved = found.Saved
				}
				c.Diverted = c.Diverted || found.Diverted
				c.Alternatives = c.Alternatives || found.Alternatives
			})
		}})
}

// holdsOriginal says whether p is the command itself: not gnsh's link,
// not an alternatives link.
func (r *run) holdsOriginal(name, p string) bool {
	l, err := r.t.readlink(p)
	return err == nil && !r.t.isGnshLink(p) && l != "/etc/alternatives/"+name
}

// planDiversion diverts p to p.distrib for package gnsh, keeping the
// original there: it is linked (the same inode) to p.distrib first, then
// dpkg-divert --no-rename records the diversion, so p is never missing.
// What an interrupted run left is taken up: p.distrib kept and no
// diversion yet, or the diversion with the original back at p only.
func (r *run) planDiversion(name, p string, fresh bool, divs map[string]diversion) error {
	s := p + distribSuffix
	d, has := divs[p]
	if fresh && d.pkg == divertPackage {
		has = false // undone first
	}
	if has && (d.pkg != divertPackage || d.to != s) {
		return &Error{Msg: fmt.Sprintf("%s is already diverted to %s by %s", p, d.to, pkgName(d.pkg)),
			Fix: fmt.Sprintf("remove that diversion (dpkg-divert --list %s shows it) or use --mode symlink", p)}
	}
	if da, ok := divs[alias(p)]; ok && da.pkg != divertPackage {
		return &Error{Msg: fmt.Sprintf("%s, the same file as %s on a merged /usr, is diverted to %s by %s", alias(p), p, da.to, pkgName(da.pkg)),
			Fix: fmt.Sprintf("remove that diversion (dpkg-divert --list %s shows it) or use --mode symlink", alias(p))}
	}
	rec := func(st *State) {
		setCommand(st, name, func(c *Command) { c.Path, c.Diverted, c.Saved = p, true, s })
	}
	if has {
		if fresh {
			return nil
		}
		if r.t.exists(s) {
			r.recordFound(name, fmt.Sprintf("gnsh's diversion of %s to %s", p, s), Command{Path: p, Diverted: true, Saved: s})
			return nil
		}
		if !r.holdsOriginal(name, p) {
			if r.t.isGnshLink(p) {
				return r.missingOriginal(Command{Name: name, Path: p, Saved: s})
			}
			return nil
		}
		// The original back at p, the diversion still there: an
		// uninstall stopped between the two.
		r.add(step{desc: fmt.Sprintf("kept the original %s as %s (diverted there)", p, s),
			do:   func() error { return r.t.link(p, s) },
			undo: func() error { return ignoreMissing(r.t.remove(s)) },
			pre:  rec})
		return nil
	}
	mine := false
	if c := r.oldCommand(name); c != nil && c.Diverted && c.Saved == s {
		mine = true // kept there by an interrupted install, not yet diverted
	}
	if !fresh && !mine && r.t.exists(s) {
		return &Error{Msg: fmt.Sprintf("%s exists (%s) but is no diversion of %s", s, describe(r.t, s), p),
			Fix: "move it away, then run gnsh install again"}
	}
	// keep: link p to s first (not over the original that an interrupted
	// install kept there when p is gnsh's); orig: s holds the original.
	keep := fresh || r.t.exists(p) && !(mine && r.t.isGnshLink(p))
	orig := keep || mine && r.t.exists(s)
	r.add(step{desc: fmt.Sprintf("diverted %s to %s", p, s),
		do: func() error {
			if keep {
				if err := r.t.link(p, s); err != nil {
					return err
				}
			}
			if err := r.dpkgDivert("--divert", s, "--add", p); err != nil {
				if keep {
					r.t.remove(s)
				}
				return err
			}
			return nil
		},
		undo: func() error {
			if err := r.dpkgDivert("--remove", p); err != nil {
				return err
			}
			return ignoreMissing(r.t.remove(s))
		},
		pre: func(st *State) {
			setCommand(st, name, func(c *Command) {
				c.Path, c.Diverted = p, true
				if orig {
					c.Saved = s
				}
			})
		}})
	return nil
}

func pkgName(p string) string {
	if p == ":" {
		return "a local diversion"
	}
	return "package " + p
}

// planLink makes p (diverted, the original at saved) a link to bin.
func (r *run) planLink(name, p, saved, bin string, fresh bool) {
	l, _ := r.t.readlink(p)
	if !fresh && l == bin {
		return
	}
	prev := ""
	if !fresh && r.t.isGnshLink(p) {
		prev = l
	}
	existed := fresh || r.t.exists(p)
	r.add(step{desc: fmt.Sprintf("linked %s to %s", p, bin),
		do: func() error { return r.t.symlink(bin, p) },
		undo: func() error {
			switch {
			case prev != "":
				return r.t.symlink(prev, p)
			case existed && r.t.exists(saved):
				return r.t.link(saved, p)
			}
			return r.t.remove(p)
		},
		pre: func(st *State) { setCommand(st, name, func(c *Command) { c.Path = p }) }})
}

// planReplace makes p a link to bin, keeping what was there as
// p.gnsh-orig: RPM systems' divert (the systemd package's trigger runs
// gnsh install again after an update put its links back: the new
// original then replaces the kept one) and the symlink mode.
func (r *run) planReplace(name, p, bin string, fresh bool) {
	s := p + origSuffix
	l, _ := r.t.readlink(p)
	if !fresh && l == bin {
		found := Command{Path: p}
		what := "the link " + p + " to " + bin
		if r.t.exists(s) {
			found.Saved, what = s, what+", the original kept as "+s
		}
		r.recordFound(name, what, found)
		return
	}
	r.mkdirs(p)
	switch {
	case !fresh && r.t.isGnshLink(p): // another gnsh's link
		r.add(step{desc: fmt.Sprintf("linked %s to %s", p, bin),
			do:   func() error { return r.t.symlink(bin, p) },
			undo: func() error { return r.t.symlink(l, p) },
			pre:  func(st *State) { setCommand(st, name, func(c *Command) { c.Path = p }) }})
	case fresh || r.t.exists(p):
		hadS := !fresh && r.t.exists(s)
		r.add(step{desc: fmt.Sprintf("replaced %s by a link to %s (the original kept as %s)", p, bin, s),
			do: func() error {
				if err := r.t.link(p, s); err != nil {
					return err
				}
				return r.t.symlink(bin, p)
			},
			undo: func() error {
				if hadS {
					return r.t.link(s, p)
				}
				return r.t.restore(s, p)
			},
			pre: func(st *State) { setCommand(st, name, func(c *Command) { c.Path, c.Saved = p, s }) }})
	default:
		r.add(step{desc: fmt.Sprintf("linked %s to %s", p, bin),
			do:   func() error { return r.t.symlink(bin, p) },
			undo: func() error { return r.t.remove(p) },
			pre:  func(st *State) { setCommand(st, name, func(c *Command) { c.Path = p }) }})
	}
}

// planAlternatives makes p the link of an alternatives group name with
// bin (priority 100) and the original, kept at saved, (priority 10):
// update-alternatives --config NAME switches between them.
func (r *run) planAlternatives(name, p, saved, bin string, fresh bool) error {
	altLink := "/etc/alternatives/" + name
	choices := map[string]bool{}
	l, _ := r.t.readlink(p)
	if !fresh {
		choices = r.altChoices(name)
		if choices[bin] && choices[saved] && l == altLink {
			r.recordFound(name, fmt.Sprintf("the alternatives of %s: %s and %s", name, bin, saved), Command{Path: p, Saved: saved, Alternatives: true})
			return nil
		}
	}
	if r.family != Debian {
		if !fresh && !r.t.exists(p) {
			return &Error{Msg: p + " is missing: no original to keep as the lower-priority alternative", Fix: "use --mode divert"}
		}
		if fresh || l != altLink {
			r.add(step{desc: fmt.Sprintf("kept the original %s as %s", p, saved),
				do:   func() error { return r.t.link(p, saved) },
				undo: func() error { return ignoreMissing(r.t.remove(saved)) },
				pre:  func(st *State) { setCommand(st, name, func(c *Command) { c.Path, c.Saved = p, saved }) }})
		}
	} else if !fresh && !r.t.exists(p) && !r.t.exists(saved) {
		return &Error{Msg: p + " is missing: no original to keep as the lower-priority alternative", Fix: "use --mode divert"}
	}
	r.add(step{desc: fmt.Sprintf("made %s the alternatives link of %s: %s (priority 100), else %s (priority 10)", p, name, bin, saved),
		do: func() error {
			err := r.alternatives("--install", p, name, bin, "100")
			if err == nil {
				err = r.alternatives("--install", p, name, saved, "10")
			}
			if err != nil {
				if uerr := r.dropAlternatives(name, p, saved, bin); uerr != nil {
					return fmt.Errorf("%v; and undoing it: %v", err, uerr)
				}
			}
			return err
		},
		undo: func() error { return r.dropAlternatives(name, p, saved, bin) },
		pre: func(st *State) {
			setCommand(st, name, func(c *Command) { c.Path, c.Saved, c.Alternatives = p, saved, true })
		}})
	return nil
}

// dropAlternatives undoes planAlternatives without p ever missing: the
// tool removes bin's choice (p then leads to saved), the original is
// renamed over p, then the group's now stale admin file and
// /etc/alternatives link are removed (the tool would remove p itself
// with the last choice, even when p is the original link again).
func (r *run) dropAlternatives(name, p, saved, bin string) error {
	ch := r.altChoices(name)
	if ch[bin] && ch[saved] {
		if err := r.alternatives("--remove", name, bin); err != nil {
			return err
		}
	}
	if r.t.exists(saved) {
		if err := r.t.restore(saved, p); err != nil {
			return err
		}
	}
	if err := ignoreMissing(r.t.remove("/etc/alternatives/" + name)); err != nil {
		return err
	}
	return ignoreMissing(r.t.remove(r.altAdmin(name)))
}

// planUndoCommands puts every command recorded in old back as it was.
func (r *run) planUndoCommands(old *State) error {
	var divs map[string]diversion
	for _, c := range old.Commands {
		if c.Diverted && divs == nil {
			var err error
			if divs, err = r.diversions(); err != nil {
				return &Error{Msg: "cannot read dpkg's diversions: " + err.Error(), Fix: "check /var/lib/dpkg/diversions"}
			}
		}
	}
	for i := len(old.Commands) - 1; i >= 0; i-- {
		if err := r.planUndoCommand(old.Commands[i], old.Bin, divs); err != nil {
			return err
		}
	}
	return nil
}

// planUndoCommand puts the command c back as it was.
func (r *run) planUndoCommand(c Command, bin string, divs map[string]diversion) error {
	last := func(st *State) { dropCommand(st, c.Name) }
	if c.Alternatives {
		if !r.t.exists(c.Saved) && r.t.isGnshLink(c.Path) {
			return r.missingOriginal(c)
		}
		r.add(step{desc: fmt.Sprintf("removed the alternatives of %s and restored %s from %s", c.Name, c.Path, c.Saved),
			do: func() error { return r.dropAlternatives(c.Name, c.Path, c.Saved, bin) },
			undo: func() error {
				if err := r.t.link(c.Path, c.Saved); err != nil {
					return err
				}
				if err := r.alternatives("--install", c.Path, c.Name, bin, "100"); err != nil {
					return err
				}
				return r.alternatives("--install", c.Path, c.Name, c.Saved, "10")
			},
			rec: func(st *State) {
				if !c.Diverted {
					last(st)
				}
			}})
	} else if err := r.planRestore(c, !c.Diverted); err != nil {
		return err
	}
	if d, ok := divs[c.Path]; c.Diverted && ok && d.pkg == divertPackage {
		r.add(step{desc: fmt.Sprintf("removed the diversion of %s to %s", c.Path, d.to),
			do:   func() error { return r.dpkgDivert("--remove", c.Path) },
			undo: func() error { return r.dpkgDivert("--divert", d.to, "--add", c.Path) },
			rec:  last})
	} else if c.Diverted {
		r.add(step{desc: "forgot the diversion of " + c.Path + " (already removed)", do: func() error { return nil }, rec: last})
	}
	return nil
}

func (r *run) missingOriginal(c Command) error {
	fix := "put the original back at " + c.Saved + ", then run gnsh uninstall again"
	switch r.family {
	case Debian:
		fix = "apt-get install --reinstall systemd-sysv (its files go to the diverted names), then run gnsh uninstall again"
	case RPM:
		fix = "dnf reinstall systemd, then run gnsh uninstall again"
	}
	return &Error{Msg: fmt.Sprintf("%s, the original %s, is missing, so %s cannot be put back", c.Saved, c.Name, c.Path), Fix: fix}
}

// planRestore puts the original of a linked command back (rename of the
// kept original over gnsh's link) or removes gnsh's link where there was
// nothing.
func (r *run) planRestore(c Command, last bool) error {
	rec := func(st *State) {
		if last {
			dropCommand(st, c.Name)
		}
	}
	ours := r.t.isGnshLink(c.Path)
	l, _ := r.t.readlink(c.Path)
	switch {
	case c.Saved != "" && !r.t.exists(c.Saved):
		if ours {
			return r.missingOriginal(c)
		}
		r.add(step{desc: "forgot " + c.Path + " (its original is back)", do: func() error { return nil }, rec: rec})
	case c.Saved != "" && r.t.sameFile(c.Saved, c.Path):
		// Kept, but never switched: an install stopped in between.
		r.add(step{desc: fmt.Sprintf("removed %s (the same file as %s, which was not switched yet)", c.Saved, c.Path),
			do:   func() error { return r.t.remove(c.Saved) },
			undo: func() error { return r.t.link(c.Path, c.Saved) },
			rec:  rec})
	case c.Saved != "" && (ours || !r.t.exists(c.Path)):
		r.add(step{desc: fmt.Sprintf("restored %s from %s", c.Path, c.Saved),
			do: func() error { return r.t.rename(c.Saved, c.Path) },
			undo: func() error {
				if err := r.t.link(c.Path, c.Saved); err != nil {
					return err
				}
				if l == "" {
					return r.t.remove(c.Path)
				}
				return r.t.symlink(l, c.Path)
			},
			rec: rec})
	case c.Saved != "":
		// A package update put the original back over gnsh's link (RPM's
		// systemd): the kept copy is stale.
		r.add(step{desc: fmt.Sprintf("removed %s (%s was put back by a package update)", c.Saved, c.Path),
			do: func() error { return r.t.remove(c.Saved) }, rec: rec})
	case ours:
		r.add(step{desc: "removed " + c.Path,
			do:   func() error { return r.t.remove(c.Path) },
			undo: func() error { return r.t.symlink(l, c.Path) },
			rec:  rec})
	default:
		r.add(step{desc: "forgot " + c.Path + " (no longer gnsh's)", do: func() error { return nil }, rec: rec})
	}
	return nil
}
