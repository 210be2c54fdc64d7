package install

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	installfiles "github.com/gnsh/gnsh/install"
	"github.com/gnsh/gnsh/internal/nodefacts"
)

// testTools runs dpkg-divert and update-alternatives for real (always
// with --root pointing at the test's tree), emulates RHEL's alternatives
// (run chrooted by the code; not on this host) and records systemctl.
type testTools struct {
	t     *testing.T
	root  string
	mu    sync.Mutex
	calls []string
	fail  string // an argv prefix that fails
	// stopped: systemctl is-active says gnsh.service is not running.
	stopped bool
}

func (f *testTools) Run(ctx context.Context, argv ...string) error {
	f.mu.Lock()
	f.calls = append(f.calls, strings.Join(argv, " "))
	f.mu.Unlock()
	if f.fail != "" && strings.HasPrefix(strings.Join(argv, " "), f.fail) {
		return fmt.Errorf("%s: injected failure", argv[0])
	}
	switch argv[0] {
	case "dpkg-divert", "update-alternatives":
		if len(argv) < 3 || argv[1] != "--root" || argv[2] != f.root {
			f.t.Errorf("%s without --root %s: %q", argv[0], f.root, argv)
			return errors.New("refused")
		}
		return ExecTools{}.Run(ctx, argv...)
	case "chroot":
		if argv[1] != f.root || argv[2] != "alternatives" {
			f.t.Errorf("unexpected chroot %q", argv)
			return errors.New("refused")
		}
		return fakeAlternatives(target{root: f.root}, argv[3:])
	case "systemctl":
		if argv[1] == "is-active" && f.stopped {
			return errors.New("inactive")
		}
		return nil
	}
	f.t.Errorf("unexpected tool %q", argv)
	return errors.New("unexpected tool")
}

func (f *testTools) called(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// fakeAlternatives does what chkconfig's alternatives --install and
// --remove do to the files: the admin file /var/lib/alternatives/NAME
// (mode, link, blank line, then path and priority per choice), the
// /etc/alternatives/NAME link to the best choice and the link itself;
// removing the last choice removes all three.
func fakeAlternatives(t target, args []string) error {
	type choice struct {
		path string
		prio int
	}
	read := func(name string) (string, []choice) {
		data, err := t.readFile("/var/lib/alternatives/" + name)
		if err != nil {
			return "", nil
		}
		l := strings.Split(strings.TrimSpace(string(data)), "\n")
		var cs []choice
		for i := 3; i+1 < len(l); i += 2 {
			p, _ := strconv.Atoi(l[i+1])
			cs = append(cs, choice{l[i], p})
		}
		return l[1], cs
	}
	write := func(name, link string, cs []choice) error {
		if len(cs) == 0 {
			t.remove("/var/lib/alternatives/" + name)
			t.remove("/etc/alternatives/" + name)
			return ignoreMissing(t.remove(link))
		}
		s := "auto\n" + link + "\n\n"
		best := cs[0]
		for _, c := range cs {
			s += fmt.Sprintf("%s\n%d\n", c.path, c.prio)
			if c.prio > best.prio {
				best = c
			}
		}
		if err := t.writeFile("/var/lib/alternatives/"+name, []byte(s), 0o644); err != nil {
			return err
		}
		if err := t.symlink(best.path, "/etc/alternatives/"+name); err != nil {
			return err
		}
		return t.symlink("/etc/alternatives/"+name, link)
	}
	switch {
	case len(args) == 5 && args[0] == "--install":
		link, name, path := args[1], args[2], args[3]
		prio, _ := strconv.Atoi(args[4])
		if !t.exists(path) {
			return fmt.Errorf("alternatives: %s does not exist", path)
		}
		_, cs := read(name)
		var out []choice
		for _, c := range cs {
			if c.path != path {
				out = append(out, c)
			}
		}
		return write(name, link, append(out, choice{path, prio}))
	case len(args) == 3 && args[0] == "--remove":
		link, cs := read(args[1])
		var out []choice
		for _, c := range cs {
			if c.path != args[2] {
				out = append(out, c)
			}
		}
		return write(args[1], link, out)
	}
	return fmt.Errorf("fake alternatives: unexpected %q", args)
}

func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"dpkg-divert", "update-alternatives"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
				t.Fatalf("%s not found", tool)
			}
			t.Skipf("%s not found (Debian host tools)", tool)
		}
	}
}

func mkfile(t *testing.T, root, p, content string, mode fs.FileMode) {
	t.Helper()
	h := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(h, mode)
}

func mklink(t *testing.T, root, target, p string) {
	t.Helper()
	h := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, h); err != nil {
		t.Fatal(err)
	}
}

// scratchDir is a new directory for a test tree, removed at the end: on
// /dev/shm when that is a tmpfs, since gnsh follows each change with an
// fsync, which a tmpfs answers at once and a disk does not.
func scratchDir(t *testing.T) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 { // TMPFS_MAGIC
		return t.TempDir()
	}
	d, err := os.MkdirTemp("/dev/shm", "gnsh-install-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fakeDebian is a Debian 12-like tree: merged /usr, systemd-sysv's
// /sbin/{halt,poweroff,reboot,shutdown} -> /bin/systemctl.
func fakeDebian(t *testing.T) string {
	root := scratchDir(t)
	mklink(t, root, "usr/sbin", "/sbin")
	mklink(t, root, "usr/bin", "/bin")
	mkfile(t, root, "/usr/bin/systemctl", "#!/bin/sh\n# systemctl\n", 0o755)
	mkfile(t, root, "/etc/os-release", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n", 0o644)
	var list strings.Builder
	for _, c := range nodefacts.LegacyCommands {
		mklink(t, root, "/bin/systemctl", "/usr/sbin/"+c)
		list.WriteString("/sbin/" + c + "\n")
	}
	mkfile(t, root, "/var/lib/dpkg/info/systemd-sysv.list", "/.\n/sbin\n"+list.String(), 0o644)
	mkfile(t, root, "/var/lib/dpkg/status", "", 0o644)
	mkfile(t, root, "/var/lib/dpkg/diversions", "", 0o644)
	for _, d := range []string{"/var/lib/dpkg/alternatives", "/etc/alternatives", "/etc/systemd/system", "/usr/local/sbin"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	return root
}

// fakeRocky is a Rocky 9-like tree: systemd's /usr/sbin/NAME ->
// ../bin/systemctl, no dpkg.
func fakeRocky(t *testing.T) string {
	root := scratchDir(t)
	mklink(t, root, "usr/sbin", "/sbin")
	mklink(t, root, "usr/bin", "/bin")
	mkfile(t, root, "/usr/bin/systemctl", "#!/bin/sh\n# systemctl\n", 0o755)
	mkfile(t, root, "/etc/os-release", "NAME=\"Rocky Linux\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.4\"\n", 0o644)
	for _, c := range nodefacts.LegacyCommands {
		mklink(t, root, "../bin/systemctl", "/usr/sbin/"+c)
	}
	for _, d := range []string{"/var/lib/alternatives", "/etc/alternatives", "/etc/systemd/system", "/usr/local/sbin"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	return root
}

// listing is every path below root with its type, mode, owner and link
// target or content hash; the tools' own logs and backups (dpkg's
// diversions-old, update-alternatives' log) are left out.
func listing(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(root, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, root)
		switch rel {
		case "/var/lib/dpkg/diversions-old", "/var/log/alternatives.log", "/var/log":
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		what := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			what = "-> " + l
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			what = fmt.Sprintf("sha256:%x", sha256.Sum256(data))[:20]
		}
		lines = append(lines, fmt.Sprintf("%s %v %d:%d %s", rel, fi.Mode(), st.Uid, st.Gid, what))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func diffListing(before, after string) string {
	b, a := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		b[l] = true
	}
	for _, l := range strings.Split(after, "\n") {
		a[l] = true
	}
	var out []string
	for l := range b {
		if !a[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range a {
		if !b[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

type rig struct {
	t     *testing.T
	root  string
	tools *testTools
	self  string
}

func newRig(t *testing.T, root string) *rig {
	self := filepath.Join(t.TempDir(), "gnsh-build")
	mkfile(t, "/", self, "\x7fELF a gnsh build\n", 0o755)
	return &rig{t: t, root: root, tools: &testTools{t: t, root: root}, self: self}
}

func (r *rig) opts(mode string) Options {
	return Options{Root: r.root, Mode: mode, Self: r.self, Tools: r.tools}
}

func (r *rig) install(o Options) (string, error) {
	var out bytes.Buffer
	o.Out = &out
	err := Install(context.Background(), o)
	return out.String(), err
}

func (r *rig) uninstall(o Options) (string, error) {
	var out bytes.Buffer
	o.Out = &out
	err := Uninstall(context.Background(), o)
	return out.String(), err
}

func (r *rig) mustInstall(o Options) string {
	r.t.Helper()
	out, err := r.install(o)
	if err != nil {
		r.t.Fatalf("install %+v: %v\n%s", o.Mode, err, out)
	}
	return out
}

func (r *rig) mustUninstall(o Options) string {
	r.t.Helper()
	out, err := r.uninstall(o)
	if err != nil {
		r.t.Fatalf("uninstall: %v\n%s", err, out)
	}
	return out
}

// resolves says what each command found through PATH dirs resolves to.
func (r *rig) resolves(path string) map[string]string {
	m := map[string]string{}
	for _, c := range nodefacts.LegacyCommands {
		for _, d := range filepath.SplitList(path) {
			p, err := nodefacts.ResolveIn(r.root, filepath.Join(d, c))
			if err == nil {
				m[c] = p
				break
			}
		}
	}
	return m
}

func (r *rig) wantCommands(path, want string) {
	r.t.Helper()
	for c, got := range r.resolves(path) {
		if got != want {
			r.t.Errorf("%s in %s resolves to %s, want %s", c, path, got, want)
		}
	}
}

const sysPath = "/sbin:/bin:/usr/sbin:/usr/bin" // RHEL's secure_path, Ansible's search

func TestModesInstallIdempotentSwitchUninstall(t *testing.T) {
	needTools(t)
	for _, fam := range []string{"debian", "rocky"} {
		for _, mode := range []string{ModeDivert, ModeAlternatives, ModeSymlink} {
			t.Run(fam+"/"+mode, func(t *testing.T) {
				t.Parallel()
				root := fakeTree(t, fam)
				r := newRig(t, root)
				before := listing(t, root)
				out := r.mustInstall(r.opts(mode))
				t.Logf("install:\n%s", out)
				if mode == ModeSymlink {
					r.wantCommands(nodefacts.DefaultRootPath, DefaultBin)
					if !strings.Contains(out, "warning: --mode symlink") {
						t.Errorf("no symlink warning:\n%s", out)
					}
				} else {
					r.wantCommands(sysPath, DefaultBin)
				}
				installed := listing(t, root)
				if out := r.mustInstall(r.opts(mode)); !strings.HasSuffix(out, NothingToChange+"\n") {
					t.Errorf("second install changed something:\n%s", out)
				}
				if out := r.mustInstall(r.opts("")); !strings.HasSuffix(out, NothingToChange+"\n") {
					t.Errorf("install without --mode after --mode %s changed something:\n%s", mode, out)
				}
				if d := diffListing(installed, listing(t, root)); d != "" {
					t.Errorf("idempotent runs changed files:\n%s", d)
				}
				// Switch to each other mode and back.
				for _, other := range []string{ModeDivert, ModeAlternatives, ModeSymlink} {
					if other == mode {
						continue
					}
					out := r.mustInstall(r.opts(other))
					t.Logf("switch to %s:\n%s", other, out)
					if other == ModeSymlink {
						r.wantCommands(nodefacts.DefaultRootPath, DefaultBin)
					} else {
						r.wantCommands(sysPath, DefaultBin)
					}
					if mode == ModeSymlink || other == ModeSymlink {
						// The other mode's paths are back as they were.
						for c, p := range r.resolves(sysPath) {
							if other == ModeSymlink && p != "/usr/bin/systemctl" {
								t.Errorf("after switching to symlink, %s in %s is %s", c, sysPath, p)
							}
						}
					}
					if out := r.mustInstall(r.opts(other)); !strings.HasSuffix(out, NothingToChange+"\n") {
						t.Errorf("install --mode %s again changed something:\n%s", other, out)
					}
				}
				r.mustInstall(r.opts(mode))
				if d := diffListing(installed, listing(t, root)); d != "" {
					t.Errorf("back in mode %s, the files differ from the first install:\n%s", mode, d)
				}
				out = r.mustUninstall(r.opts(""))
				t.Logf("uninstall:\n%s", out)
				if d := diffListing(before, listing(t, root)); d != "" {
					t.Errorf("uninstall did not restore the tree:\n%s", d)
				}
				if out := r.mustUninstall(r.opts("")); out != NothingToChange+"\n" {
					t.Errorf("second uninstall: %q", out)
				}
			})
		}
	}
}

func TestDefaultModePerDistribution(t *testing.T) {
	needTools(t)
	for _, tc := range []struct {
		name, osRelease, want string
	}{
		{"debian", "ID=debian\n", ModeDivert},
		{"ubuntu", "ID=ubuntu\nID_LIKE=debian\n", ModeDivert},
		{"rocky", "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n", ModeDivert},
		{"arch", "ID=arch\n", ModeSymlink},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeDebian(t)
			mkfile(t, root, "/etc/os-release", tc.osRelease, 0o644)
			r := newRig(t, root)
			out := r.mustInstall(r.opts(""))
			st, err := readState(target{root: root})
			if err != nil || st == nil {
				t.Fatalf("state: %v", err)
			}
			if st.Mode != tc.want {
				t.Errorf("mode %s, want %s", st.Mode, tc.want)
			}
			if tc.want == ModeSymlink && !strings.Contains(out, "warning: unknown distribution (ID=arch") {
				t.Errorf("no warning about the unknown distribution:\n%s", out)
			}
			if tc.want == ModeSymlink {
				if _, err := r.install(r.opts(ModeDivert)); err == nil || !strings.Contains(err.Error(), "use --mode symlink") {
					t.Errorf("--mode divert on an unknown distribution: %v", err)
				}
			}
		})
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	r := newRig(t, root)
	before := listing(t, root)
	o := r.opts(ModeDivert)
	o.DryRun = true
	out := r.mustInstall(o)
	if !strings.Contains(out, "gnsh: dry run, not done: diverted /sbin/reboot to /sbin/reboot.distrib") {
		t.Errorf("dry run output:\n%s", out)
	}
	if d := diffListing(before, listing(t, root)); d != "" {
		t.Errorf("dry run changed:\n%s", d)
	}
	if n := r.tools.called(""); n != 0 {
		t.Errorf("dry run ran %d tools: %q", n, r.tools.calls)
	}
	r.mustInstall(r.opts(ModeDivert))
	installed := listing(t, root)
	for _, mode := range []string{ModeAlternatives, ModeSymlink} {
		o := r.opts(mode)
		o.DryRun = true
		r.mustInstall(o)
	}
	o = r.opts("")
	o.DryRun = true
	if out := r.mustUninstall(o); !strings.Contains(out, "dry run, not done: restored /sbin/reboot from /sbin/reboot.distrib") {
		t.Errorf("dry-run uninstall:\n%s", out)
	}
	if d := diffListing(installed, listing(t, root)); d != "" {
		t.Errorf("dry runs changed:\n%s", d)
	}
}

// fakeTree is fakeRocky for "rocky", else fakeDebian.
func fakeTree(t *testing.T, fam string) string {
	if fam == "rocky" {
		return fakeRocky(t)
	}
	return fakeDebian(t)
}

// failureCase is a tree with gnsh installed in the setup modes (none, one
// or two in turn), on which do runs: "uninstall" or a mode to install.
type failureCase struct {
	fam, name string
	setup     []string
	do        string
}

func (tc failureCase) rig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, fakeTree(t, tc.fam))
	for _, m := range tc.setup {
		r.mustInstall(r.opts(m))
	}
	return r
}

func (tc failureCase) run(r *rig, o Options) (string, error) {
	if tc.do == "uninstall" {
		return r.uninstall(o)
	}
	return r.install(o)
}

// TestFailureLeavesOldState makes each step of an install, a mode switch
// and an uninstall fail in turn: the tree is always as before.
func TestFailureLeavesOldState(t *testing.T) {
	needTools(t)
	for _, fam := range []string{"debian", "rocky"} {
		for _, tc := range []failureCase{
			{fam, "fresh divert", nil, ModeDivert},
			{fam, "fresh alternatives", nil, ModeAlternatives},
			{fam, "fresh symlink", nil, ModeSymlink},
			{fam, "divert to alternatives", []string{ModeDivert}, ModeAlternatives},
			{fam, "alternatives to symlink", []string{ModeAlternatives}, ModeSymlink},
			{fam, "symlink to divert", []string{ModeSymlink}, ModeDivert},
			{fam, "uninstall divert", []string{ModeDivert}, "uninstall"},
			{fam, "uninstall alternatives", []string{ModeAlternatives}, "uninstall"},
		} {
			t.Run(fam+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				// The steps of a dry run are the steps to fail.
				probe := tc.rig(t)
				o := probe.opts(tc.do)
				o.DryRun = true
				out, err := tc.run(probe, o)
				if err != nil {
					t.Fatalf("dry run: %v\n%s", err, out)
				}
				var descs []string
				for _, l := range strings.Split(out, "\n") {
					if d, ok := strings.CutPrefix(l, "gnsh: dry run, not done: "); ok {
						descs = append(descs, d)
					}
				}
				if len(descs) < 3 {
					t.Fatalf("only %d steps:\n%s", len(descs), out)
				}
				for i, d := range descs {
					r := tc.rig(t)
					before := listing(t, r.root)
					o := r.opts(tc.do)
					o.fail = func(desc string) error {
						if desc == d {
							return errors.New("injected")
						}
						return nil
					}
					out, err := tc.run(r, o)
					if err == nil {
						t.Fatalf("step %d %q: no error\n%s", i, d, out)
					}
					if !strings.Contains(err.Error(), "every change before it was undone") || !strings.Contains(err.Error(), "; fix: ") {
						t.Errorf("step %d: error %q", i, err)
					}
					if strings.Contains(err.Error(), "\n") {
						t.Errorf("error is not one line: %q", err)
					}
					if diff := diffListing(before, listing(t, r.root)); diff != "" {
						t.Errorf("failing step %d %q left:\n%s\noutput:\n%s", i, d, diff, out)
					}
				}
			})
		}
	}
}

// A tool failing half-way (dpkg-divert for the third command) undoes
// the first two.
func TestToolFailureUndone(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	r := newRig(t, root)
	before := listing(t, root)
	r.tools.fail = "dpkg-divert --root " + root + " --package gnsh --no-rename --divert /sbin/poweroff.distrib"
	out, err := r.install(r.opts(ModeDivert))
	if err == nil || !strings.Contains(err.Error(), `stopped at "diverted /sbin/poweroff to /sbin/poweroff.distrib"`) {
		t.Fatalf("err %v\n%s", err, out)
	}
	if !strings.Contains(out, "gnsh: undone: linked /sbin/reboot to /usr/local/sbin/gnsh") {
		t.Errorf("output:\n%s", out)
	}
	if d := diffListing(before, listing(t, root)); d != "" {
		t.Errorf("left:\n%s", d)
	}
}

func TestConflictingDiversionRefused(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	r := newRig(t, root)
	os.MkdirAll(filepath.Join(root, "usr/lib/molly-guard"), 0o755)
	mklink(t, root, "usr/lib", "/lib")
	if err := (ExecTools{}).Run(context.Background(), "dpkg-divert", "--root", root, "--package", "molly-guard",
		"--rename", "--divert", "/lib/molly-guard/reboot", "--add", "/sbin/reboot"); err != nil {
		t.Fatal(err)
	}
	before := listing(t, root)
	_, err := r.install(r.opts(ModeDivert))
	if err == nil || !strings.Contains(err.Error(), "/sbin/reboot is already diverted to /lib/molly-guard/reboot by package molly-guard") {
		t.Fatalf("err %v", err)
	}
	if d := diffListing(before, listing(t, root)); d != "" {
		t.Errorf("changed:\n%s", d)
	}
}

func TestEditedConfigKept(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	r := newRig(t, root)
	r.mustInstall(r.opts(ModeDivert))
	mkfile(t, root, ConfigPath, string(installfiles.Config())+"drainTimeout: 2m\n", 0o644)
	out := r.mustUninstall(r.opts(""))
	if !strings.Contains(out, "gnsh: kept /etc/gnsh/config.yaml: it was edited") || strings.Contains(out, "removed directory /etc/gnsh") {
		t.Errorf("output:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, ConfigPath)); err != nil {
		t.Errorf("edited config removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, StatePath)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("state file left: %v", err)
	}
	// An existing config is never touched, nor recorded.
	r.mustInstall(r.opts(ModeDivert))
	st, _ := readState(target{root: root})
	if st.file(ConfigPath) != nil {
		t.Errorf("a config found is recorded as gnsh's: %+v", st.Files)
	}
}

// Files found where install writes (a `make install`) are kept beside and
// put back; the unit's ExecStart follows --bin.
func TestFoundFilesPutBack(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	mkfile(t, root, DefaultBin, "an older gnsh\n", 0o750)
	mkfile(t, root, UnitPath, "[Service]\nExecStart=/usr/local/sbin/gnsh agent\n", 0o600)
	r := newRig(t, root)
	before := listing(t, root)
	out := r.mustInstall(r.opts(ModeDivert))
	if !strings.Contains(out, "installed /usr/local/sbin/gnsh (the file found there kept as /usr/local/sbin/gnsh.gnsh-orig)") {
		t.Errorf("output:\n%s", out)
	}
	got, _ := os.ReadFile(filepath.Join(root, UnitPath))
	if !bytes.Equal(got, installfiles.Unit()) {
		t.Errorf("unit is not install/systemd/gnsh.service")
	}
	r.mustUninstall(r.opts(""))
	if d := diffListing(before, listing(t, root)); d != "" {
		t.Errorf("not put back:\n%s", d)
	}

	o := r.opts(ModeSymlink)
	o.Bin = "/opt/gnsh/bin/gnsh"
	r.mustInstall(o)
	got, _ = os.ReadFile(filepath.Join(root, UnitPath))
	if !bytes.Contains(got, []byte("\nExecStart=/opt/gnsh/bin/gnsh agent\n")) {
		t.Errorf("unit's ExecStart does not follow --bin")
	}
	r.wantCommands(nodefacts.DefaultRootPath, "/opt/gnsh/bin/gnsh")
	r.mustUninstall(r.opts(""))
	if d := diffListing(before, listing(t, root)); d != "" {
		t.Errorf("not put back:\n%s", d)
	}
}

// --packaged: the package's /usr/sbin/gnsh and unit; only the commands
// change (the package's scripts enable the agent on a first install), and
// a mask of the unit is no error.
func TestPackaged(t *testing.T) {
	needTools(t)
	for _, fam := range []string{"debian", "rocky"} {
		t.Run(fam, func(t *testing.T) {
			root := fakeDebian(t)
			unitDir := "/lib/systemd/system/"
			if fam == "rocky" {
				root, unitDir = fakeRocky(t), "/usr/lib/systemd/system/"
			}
			mkfile(t, root, PackagedBin, "packaged gnsh\n", 0o755)
			mkfile(t, root, unitDir+UnitName, string(unitText(PackagedBin)), 0o644)
			r := newRig(t, root)
			before := listing(t, root)
			o := r.opts(ModeDivert)
			o.Packaged = true
			out := r.mustInstall(o)
			for _, not := range []string{"installed", "/etc/gnsh", "enabled"} {
				if strings.Contains(out, not) {
					t.Errorf("--packaged output has %q:\n%s", not, out)
				}
			}
			r.wantCommands(sysPath, PackagedBin)
			if out := r.mustInstall(o); out != NothingToChange+"\n" {
				t.Errorf("again: %q", out)
			}
			// Masked (systemctl mask: a link to /dev/null in /etc): the
			// package's unit is read, the mask stays.
			mklink(t, root, "/dev/null", UnitPath)
			if out := r.mustInstall(o); out != NothingToChange+"\n" {
				t.Errorf("masked: %q", out)
			}
			os.Remove(filepath.Join(root, UnitPath))
			o.Mode = ""
			out = r.mustUninstall(o)
			if d := diffListing(before, listing(t, root)); d != "" {
				t.Errorf("uninstall --packaged left:\n%s\n%s", d, out)
			}
			if _, err := r.install(Options{Root: t.TempDir(), Packaged: true, Tools: r.tools}); err == nil ||
				!strings.Contains(err.Error(), "install the gnsh package") {
				t.Errorf("--packaged without the package: %v", err)
			}
		})
	}
}

// A plain install, then the package: --packaged points the commands at
// /usr/sbin/gnsh; uninstall --packaged puts them back and keeps the
// copied files; a full uninstall removes those.
func TestPlainThenPackaged(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	mkfile(t, root, PackagedBin, "packaged gnsh\n", 0o755)
	mkfile(t, root, "/lib/systemd/system/"+UnitName, string(unitText(PackagedBin)), 0o644)
	r := newRig(t, root)
	before := listing(t, root)
	r.mustInstall(r.opts(ModeDivert))
	o := r.opts(ModeDivert)
	o.Packaged = true
	out := r.mustInstall(o)
	if !strings.Contains(out, "linked /sbin/reboot to /usr/sbin/gnsh") {
		t.Errorf("output:\n%s", out)
	}
	r.wantCommands(sysPath, PackagedBin)
	o.Mode = ""
	out = r.mustUninstall(o)
	r.wantCommands(sysPath, "/usr/bin/systemctl")
	if _, err := os.Stat(filepath.Join(root, DefaultBin)); err != nil {
		t.Errorf("uninstall --packaged removed the copied binary: %v\n%s", err, out)
	}
	if out := r.mustUninstall(o); out != NothingToChange+"\n" {
		t.Errorf("uninstall --packaged again: %q", out)
	}
	r.mustUninstall(r.opts(""))
	if d := diffListing(before, listing(t, root)); d != "" {
		t.Errorf("left:\n%s", d)
	}
}

// RPM: systemd's update puts its links back; install --mode divert (the
// package trigger's command) switches them again and keeps the new
// originals; uninstall puts those back.
func TestRPMUpdateReapplied(t *testing.T) {
	root := fakeRocky(t)
	r := newRig(t, root)
	r.mustInstall(r.opts(ModeDivert))
	for _, c := range nodefacts.LegacyCommands {
		os.Remove(filepath.Join(root, "usr/sbin", c))
		mklink(t, root, "../bin/systemctl", "/usr/sbin/"+c) // as rpm writes it
	}
	mkfile(t, root, "/usr/bin/systemctl", "#!/bin/sh\n# systemctl, updated\n", 0o755)
	updated := listing(t, root)
	out := r.mustInstall(r.opts(ModeDivert))
	if !strings.Contains(out, "replaced /usr/sbin/reboot by a link to /usr/local/sbin/gnsh (the original kept as /usr/sbin/reboot.gnsh-orig)") {
		t.Errorf("output:\n%s", out)
	}
	r.wantCommands(sysPath, DefaultBin)
	if out := r.mustInstall(r.opts(ModeDivert)); out != NothingToChange+"\n" {
		t.Errorf("again: %q", out)
	}
	r.mustUninstall(r.opts(""))
	for _, l := range strings.Split(diffListing(updated, listing(t, root)), "\n") {
		if strings.Contains(l, "/usr/sbin/") && !(strings.HasPrefix(l, "- ") && strings.Contains(l, ".gnsh-orig")) {
			t.Errorf("uninstall after the update: %s", l)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/sbin/reboot.gnsh-orig")); err == nil {
		t.Errorf("reboot.gnsh-orig left")
	}
}

// Live (systemd is PID 1 of the target): daemon-reload and start on
// install, stop and daemon-reload on uninstall.
func TestLiveUnit(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	r := newRig(t, root)
	live := true
	o := r.opts(ModeDivert)
	o.Live = &live
	out := r.mustInstall(o)
	for _, want := range []string{"reloaded systemd (systemctl daemon-reload)", "restarted gnsh.service"} {
		if !strings.Contains(out, want) {
			t.Errorf("install output lacks %q:\n%s", want, out)
		}
	}
	if r.tools.called("systemctl daemon-reload") != 1 || r.tools.called("systemctl restart gnsh.service") != 1 {
		t.Errorf("calls %q", r.tools.calls)
	}
	// The fake says active: nothing more to do.
	if out := r.mustInstall(o); out != NothingToChange+"\n" {
		t.Errorf("again: %q", out)
	}
	out = r.mustUninstall(o)
	if !strings.Contains(out, "gnsh: stopped gnsh.service") || r.tools.called("systemctl daemon-reload") != 2 {
		t.Errorf("uninstall output:\n%s\ncalls %q", out, r.tools.calls)
	}
	// With --root (not live) no systemctl at all.
	r2 := newRig(t, fakeDebian(t))
	r2.mustInstall(r2.opts(ModeDivert))
	if n := r2.tools.called("systemctl"); n != 0 {
		t.Errorf("systemctl run %d times for an image", n)
	}
}

// The state file is never read or written through a link; it is 0600.
func TestStateFileNotFollowed(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	r := newRig(t, root)
	elsewhere := filepath.Join(t.TempDir(), "x.json")
	mkfile(t, "/", elsewhere, `{"version":1}`, 0o644)
	mklink(t, root, elsewhere, StatePath)
	if _, err := r.install(r.opts(ModeDivert)); err == nil || !strings.Contains(err.Error(), "cannot read what gnsh installed") {
		t.Fatalf("err %v", err)
	}
	os.Remove(filepath.Join(root, StatePath))
	r.mustInstall(r.opts(ModeDivert))
	fi, err := os.Lstat(filepath.Join(root, StatePath))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file %v %v", fi, err)
	}
}

func TestWantedBy(t *testing.T) {
	got := wantedBy(installfiles.Unit())
	if len(got) != 1 || got[0] != "multi-user.target" {
		t.Errorf("WantedBy of install/systemd/gnsh.service: %q", got)
	}
}

func TestOneAtATime(t *testing.T) {
	needTools(t)
	root := fakeDebian(t)
	r := newRig(t, root)
	f, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	before := listing(t, root)
	if _, err := r.install(r.opts(ModeDivert)); err == nil || !strings.Contains(err.Error(), "another gnsh install or uninstall is running") {
		t.Fatalf("err %v", err)
	}
	if d := diffListing(before, listing(t, root)); d != "" {
		t.Errorf("changed:\n%s", d)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	r.mustInstall(r.opts(ModeDivert))
}

// runnable says whether each command, as /sbin/NAME, /usr/sbin/NAME and
// (where there is one) /usr/local/sbin/NAME, leads to an executable file:
// systemd's or a gnsh.
func (r *rig) runnable() error {
	for _, c := range nodefacts.LegacyCommands {
		for _, d := range []string{"/sbin/", "/usr/sbin/", "/usr/local/sbin/"} {
			if _, err := os.Lstat(filepath.Join(r.root, d+c)); err != nil && d == "/usr/local/sbin/" {
				continue
			}
			p, err := nodefacts.ResolveIn(r.root, d+c)
			if err != nil {
				return fmt.Errorf("%s%s: %v", d, c, err)
			}
			fi, err := os.Stat(filepath.Join(r.root, p))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
				return fmt.Errorf("%s%s leads to %s, not an executable file", d, c, p)
			}
		}
	}
	return nil
}

// watch checks after every change the run makes that the commands stay
// runnable, reporting the first time they are not.
func (r *rig) watch(o *Options) {
	bad := false
	o.changed = func(what string) {
		if err := r.runnable(); err != nil && !bad {
			bad = true
			r.t.Errorf("after %s: %v", what, err)
		}
	}
}

// stopRE is the error of a run whose state write failed on a full disk.
var stopRE = regexp.MustCompile(`^gnsh: (?:un)?install (stopped (?:before|after) ".*"|changed nothing): cannot write ` + regexp.QuoteMeta(StatePath) +
	` \(no space left on device\)(?:; every change was undone)?; fix: make /var/lib/gnsh writable \(free space, remount read-write\), then run gnsh (?:un)?install again$`)

// TestStateWriteFailureUndoesAll makes each write of the state file fail
// in turn, alone and with every later one (a full or read-only /var stays
// so):
// the step made before it is undone with the others, the commands run
// something at every moment, and the tree is as before, state file
// included.
func TestStateWriteFailureUndoesAll(t *testing.T) {
	needTools(t)
	for _, tc := range []failureCase{
		{"debian", "fresh divert", nil, ModeDivert},
		{"debian", "fresh alternatives", nil, ModeAlternatives},
		{"rocky", "fresh divert", nil, ModeDivert},
		{"debian", "divert to alternatives", []string{ModeDivert}, ModeAlternatives},
		{"rocky", "alternatives to symlink", []string{ModeAlternatives}, ModeSymlink},
		{"debian", "uninstall divert", []string{ModeDivert}, "uninstall"},
		{"rocky", "uninstall alternatives", []string{ModeAlternatives}, "uninstall"},
	} {
		t.Run(tc.fam+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			probe := tc.rig(t)
			o := probe.opts(tc.do)
			writes := 0
			o.failWrite = func(n int) error { writes = n; return nil }
			if out, err := tc.run(probe, o); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if writes < 3 {
				t.Fatalf("only %d state writes", writes)
			}
			for n := 1; n <= writes; n++ {
				for _, later := range []bool{true, false} {
					what := fmt.Sprintf("write %d failing (and every later one: %v)", n, later)
					r := tc.rig(t)
					before := listing(t, r.root)
					o := r.opts(tc.do)
					r.watch(&o)
					o.failWrite = func(i int) error {
						if i == n || later && i > n {
							return syscall.ENOSPC
						}
						return nil
					}
					out, err := tc.run(r, o)
					if err == nil || !stopRE.MatchString(err.Error()) || strings.Contains(err.Error(), "\n") {
						t.Fatalf("%s: error %v\n%s", what, err, out)
					}
					if err := r.runnable(); err != nil {
						t.Errorf("%s: %v", what, err)
					}
					if d := diffListing(before, listing(t, r.root)); d != "" {
						t.Errorf("%s left:\n%s\noutput:\n%s", what, d, out)
					}
				}
			}
		})
	}
}

// fill writes a file into the file system of dir until it is full, then
// gives back free pages of it.
func fill(t *testing.T, dir string, free int) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{1 << 16, os.Getpagesize()} {
		buf := make([]byte, n)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// A failed write may have left part of a page: cut to whole pages.
	size := fi.Size() / int64(os.Getpagesize()) * int64(os.Getpagesize())
	if err := f.Truncate(size - int64(free*os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
}

// TestStateWriteOnFullTmpfs: the state file's directory a real tmpfs with
// no room left, or a page or more (as root, on a scratch --root tree:
// the host's commands are never touched). Each run that fails leaves the
// commands runnable at every moment and the tree as before.
func TestStateWriteOnFullTmpfs(t *testing.T) {
	needTools(t)
	if os.Geteuid() != 0 {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatal("mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	for _, tc := range []failureCase{
		{"debian", "fresh divert", nil, ModeDivert},
		{"rocky", "divert to alternatives", []string{ModeDivert}, ModeAlternatives},
		{"debian", "uninstall alternatives", []string{ModeAlternatives}, "uninstall"},
	} {
		t.Run(tc.fam+"/"+tc.name, func(t *testing.T) {
			stops := map[string]bool{}
			for free := 0; ; free++ {
				root := fakeTree(t, tc.fam)
				dir := filepath.Join(root, filepath.Dir(StatePath))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "gnsh-test", dir).CombinedOutput(); err != nil {
					t.Fatalf("mount: %v: %s", err, out)
				}
				t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
				r := newRig(t, root)
				for _, m := range tc.setup {
					r.mustInstall(r.opts(m))
				}
				fill(t, dir, free)
				before := listing(t, root)
				o := r.opts(tc.do)
				r.watch(&o)
				out, err := tc.run(r, o)
				if err == nil {
					if free == 0 || len(stops) < 2 {
						t.Fatalf("%d pages free: no failure, failures seen: %v\n%s", free, stops, out)
					}
					t.Logf("%d pages free: done; it stopped before at %v", free, stops)
					return
				}
				m := stopRE.FindStringSubmatch(err.Error())
				if m == nil || strings.Contains(err.Error(), "\n") {
					t.Fatalf("%d pages free: error %v\n%s", free, err, out)
				}
				stops[m[1]] = true
				if err := r.runnable(); err != nil {
					t.Errorf("%d pages free: %v", free, err)
				}
				if d := diffListing(before, listing(t, root)); d != "" {
					t.Errorf("%d pages free: left\n%s\noutput:\n%s", free, d, out)
				}
				if err := exec.Command("umount", dir).Run(); err != nil {
					t.Fatalf("umount %s: %v", dir, err)
				}
			}
		})
	}
}

// clone copies the rig's tree to a new one (the same paths inside).
func (r *rig) clone() *rig {
	r.t.Helper()
	dst := filepath.Join(scratchDir(r.t), "root")
	if out, err := exec.Command("cp", "-a", r.root, dst).CombinedOutput(); err != nil {
		r.t.Fatalf("cp -a: %v: %s", err, out)
	}
	c := newRig(r.t, dst)
	c.self = r.self
	return c
}

// crashAt runs run with o, ending it at its kth change to the tree as a
// kill would (runtime.Goexit: nothing after that change is done, no
// rollback, no state written); it says whether it got that far. The
// commands must lead to an executable after every change.
func (r *rig) crashAt(o Options, k int, run func(Options) (string, error)) (crashed bool) {
	r.t.Helper()
	end := make(chan struct{})
	n := 0
	go func() {
		defer close(end)
		o.changed = func(what string) {
			n++
			if err := r.runnable(); err != nil {
				r.t.Errorf("change %d (%s): %v", n, what, err)
			}
			if n == k {
				crashed = true
				runtime.Goexit()
			}
		}
		if out, err := run(o); err != nil {
			r.t.Errorf("run to crash at change %d: %v\n%s", k, err, out)
		}
	}()
	<-end
	return crashed
}

// TestCrashAfterEachChange ends installs, mode switches and uninstalls
// after each change they make to the tree (as kill -9 or a power loss
// would), then runs the same again: it must end exactly as a run that was
// not interrupted, and an uninstall then exactly as before gnsh; on a
// copy of the interrupted tree the opposite run (uninstall, or install)
// must also end exactly as a clean one.
func TestCrashAfterEachChange(t *testing.T) {
	needTools(t)
	for _, tc := range []failureCase{
		{"debian", "fresh divert", nil, ModeDivert},
		{"debian", "fresh alternatives", nil, ModeAlternatives},
		{"debian", "fresh symlink", nil, ModeSymlink},
		{"rocky", "fresh divert", nil, ModeDivert},
		{"rocky", "fresh alternatives", nil, ModeAlternatives},
		{"debian", "divert to alternatives", []string{ModeDivert}, ModeAlternatives},
		{"rocky", "alternatives to symlink", []string{ModeAlternatives}, ModeSymlink},
		{"debian", "symlink to divert", []string{ModeSymlink}, ModeDivert},
		{"debian", "uninstall divert", []string{ModeDivert}, "uninstall"},
		{"debian", "uninstall alternatives", []string{ModeAlternatives}, "uninstall"},
		{"rocky", "uninstall alternatives", []string{ModeAlternatives}, "uninstall"},
	} {
		t.Run(tc.fam+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			pristine := failureCase{fam: tc.fam}.rig(t)
			before := listing(t, pristine.root)
			setup := pristine.clone()
			for _, m := range tc.setup {
				setup.mustInstall(setup.opts(m))
			}
			installed := listing(t, setup.root)
			clean := setup.clone()
			changes := 0
			o := clean.opts(tc.do)
			o.changed = func(string) { changes++ }
			if out, err := tc.run(clean, o); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := listing(t, clean.root)
			opposite := failureCase{do: "uninstall"}
			if tc.do == "uninstall" {
				opposite.do = tc.setup[len(tc.setup)-1]
			}
			for k := 1; k <= changes; k++ {
				r := setup.clone()
				if !r.crashAt(r.opts(tc.do), k, func(o Options) (string, error) { return tc.run(r, o) }) {
					t.Fatalf("change %d of %d not reached", k, changes)
				}
				c := r.clone()
				out, err := tc.run(r, r.opts(tc.do))
				if err != nil {
					t.Errorf("crash at change %d, run again: %v\n%s", k, err, out)
					continue
				}
				if d := diffListing(want, listing(t, r.root)); d != "" {
					t.Errorf("crash at change %d, run again: the tree differs from a clean run's:\n%s\noutput:\n%s", k, d, out)
				}
				if tc.do != "uninstall" {
					out := r.mustUninstall(r.opts(""))
					if d := diffListing(before, listing(t, r.root)); d != "" {
						t.Errorf("crash at change %d, run again, uninstall: the tree differs from before gnsh:\n%s\noutput:\n%s", k, d, out)
					}
				}
				out, err = opposite.run(c, c.opts(opposite.do))
				if err != nil {
					t.Errorf("crash at change %d, then %s: %v\n%s", k, opposite.do, err, out)
					continue
				}
				wantOpp := before
				if opposite.do != "uninstall" {
					wantOpp = installed
				}
				if d := diffListing(wantOpp, listing(t, c.root)); d != "" {
					t.Errorf("crash at change %d, then %s: the tree differs from a clean one:\n%s\noutput:\n%s", k, opposite.do, d, out)
				}
			}
			t.Logf("%d changes", changes)
		})
	}
}

// TestUnrecordedTakenUp: what gnsh made but did not record (an older
// gnsh, which recorded after each change, interrupted in between; a lost
// record): dpkg's diversion, an alternatives group, a link with its kept
// original, a file with its kept original. The next install records them
// from the tree, and uninstall then puts everything back.
func TestUnrecordedTakenUp(t *testing.T) {
	needTools(t)
	for _, fam := range []string{"debian", "rocky"} {
		for _, mode := range []string{ModeDivert, ModeAlternatives, ModeSymlink} {
			t.Run(fam+"/"+mode, func(t *testing.T) {
				root := fakeTree(t, fam)
				mkfile(t, root, DefaultBin, "an older gnsh\n", 0o755)
				if mode == ModeSymlink {
					mkfile(t, root, "/usr/local/sbin/halt", "a local halt\n", 0o755)
				}
				r := newRig(t, root)
				before := listing(t, root)
				r.mustInstall(r.opts(mode))
				installed := listing(t, root)
				st, err := readState(target{root: root})
				if err != nil {
					t.Fatal(err)
				}
				st.Commands, st.Files = nil, removeFile(st.Files, DefaultBin)
				if err := writeState(target{root: root}, st); err != nil {
					t.Fatal(err)
				}
				out := r.mustInstall(r.opts(mode))
				want := 5 // the 4 commands, the binary
				if fam == "debian" && mode == ModeAlternatives {
					want = 9 // the diversions, the alternatives
				}
				if n := strings.Count(out, "(made by an earlier gnsh run, not recorded)"); n != want {
					t.Errorf("%d lines recording what was found, want %d:\n%s", n, want, out)
				}
				if d := diffListing(installed, listing(t, root)); d != "" {
					t.Errorf("not as installed:\n%s\noutput:\n%s", d, out)
				}
				out = r.mustUninstall(r.opts(""))
				if d := diffListing(before, listing(t, root)); d != "" {
					t.Errorf("uninstall left:\n%s\noutput:\n%s", d, out)
				}
			})
		}
	}
}

// TestAgentEnablement: a first install enables and starts the node agent;
// afterwards every install (again, in another mode, with a new binary)
// leaves an admin's disable or mask as it is, and restarts the agent for
// a new binary only when it runs. A unit found before the first install
// (the Ansible role's, disabled) or a mask is not enabled either; a
// mask is neither written over nor kept aside, and stays after uninstall.
func TestAgentEnablement(t *testing.T) {
	needTools(t)
	live := true
	wants := "/etc/systemd/system/multi-user.target.wants/" + UnitName
	type rigT = rig
	setup := func(t *testing.T) (*rigT, Options) {
		r := newRig(t, fakeDebian(t))
		r.tools.stopped = true
		o := r.opts(ModeDivert)
		o.Live = &live
		return r, o
	}
	enabled := func(r *rigT) bool {
		_, err := os.Lstat(filepath.Join(r.root, wants))
		return err == nil
	}
	newBinary := func(r *rigT, what string) {
		mkfile(r.t, "/", r.self, "\x7fELF another gnsh build "+what+"\n", 0o755)
	}
	t.Run("first install, then disabled", func(t *testing.T) {
		r, o := setup(t)
		out := r.mustInstall(o)
		if !enabled(r) || !strings.Contains(out, "gnsh: started gnsh.service\n") || r.tools.called("systemctl start gnsh.service") != 1 {
			t.Fatalf("a first install did not enable and start the agent:\n%s", out)
		}
		if st, _ := readState(target{root: r.root}); st.Agent != AgentKept {
			t.Errorf("recorded agent %q, want %q", st.Agent, AgentKept)
		}
		os.Remove(filepath.Join(r.root, wants)) // systemctl disable --now
		for _, step := range []struct {
			name string
			o    func() Options
		}{
			{"again", func() Options { return o }},
			{"another mode", func() Options { o2 := o; o2.Mode = ModeAlternatives; return o2 }},
			{"a new binary", func() Options { newBinary(r, "2"); return o }},
			{"no --mode", func() Options { o2 := o; o2.Mode = ""; return o2 }},
		} {
			out := r.mustInstall(step.o())
			if enabled(r) || strings.Contains(out, "gnsh: enabled") || strings.Contains(out, "gnsh: started") || strings.Contains(out, "gnsh: restarted") {
				t.Errorf("%s: the disabled agent was touched:\n%s", step.name, out)
			}
		}
		if n := r.tools.called("systemctl start") + r.tools.called("systemctl restart"); n != 1 {
			t.Errorf("systemctl start or restart run %d times, want 1 (the first install): %q", n, r.tools.calls)
		}
		// Enabled and running again (by the admin): a new binary restarts it.
		mklink(t, r.root, UnitPath, wants)
		r.tools.stopped = false
		newBinary(r, "3")
		if out := r.mustInstall(o); !strings.Contains(out, "gnsh: restarted gnsh.service (a new gnsh or unit)\n") {
			t.Errorf("a new binary, the agent running: no restart:\n%s", out)
		}
	})
	t.Run("older record, disabled", func(t *testing.T) {
		r, o := setup(t)
		r.mustInstall(o)
		st, _ := readState(target{root: r.root})
		st.Agent = "" // as gnsh wrote it before the agent was recorded
		writeState(target{root: r.root}, st)
		os.Remove(filepath.Join(r.root, wants))
		if out := r.mustInstall(o); out != NothingToChange+"\n" || enabled(r) {
			t.Errorf("the disabled agent was touched:\n%s", out)
		}
	})
	t.Run("masked before the first install", func(t *testing.T) {
		r, o := setup(t)
		mklink(t, r.root, "/dev/null", UnitPath)
		before := listing(t, r.root)
		out := r.mustInstall(o)
		if !strings.Contains(out, "gnsh: note: gnsh.service is masked (/etc/systemd/system/gnsh.service is a link to /dev/null)") ||
			enabled(r) || strings.Contains(out, "gnsh: started") || r.tools.called("systemctl start") != 0 {
			t.Errorf("output:\n%s", out)
		}
		if l, _ := os.Readlink(filepath.Join(r.root, UnitPath)); l != "/dev/null" {
			t.Errorf("the mask is now %q", l)
		}
		if out := r.mustInstall(o); out != NothingToChange+"\n" {
			t.Errorf("again: %q", out)
		}
		out = r.mustUninstall(o)
		if d := diffListing(before, listing(t, r.root)); d != "" {
			t.Errorf("uninstall left:\n%s\n%s", d, out)
		}
	})
	t.Run("masked after install", func(t *testing.T) {
		r, o := setup(t)
		before := listing(t, r.root)
		r.mustInstall(o)
		os.Remove(filepath.Join(r.root, wants))
		os.Remove(filepath.Join(r.root, UnitPath))
		mklink(t, r.root, "/dev/null", UnitPath) // by hand: systemctl mask refuses over a unit file
		newBinary(r, "2")
		out := r.mustInstall(o)
		if l, _ := os.Readlink(filepath.Join(r.root, UnitPath)); l != "/dev/null" || enabled(r) {
			t.Errorf("the mask is now %q (enabled %v):\n%s", l, enabled(r), out)
		}
		if _, err := os.Lstat(filepath.Join(r.root, UnitPath+origSuffix)); err == nil {
			t.Errorf("the mask was kept aside as %s%s", UnitPath, origSuffix)
		}
		out = r.mustUninstall(o)
		mask := UnitPath + " Lrwxrwxrwx 0:0 -> /dev/null"
		if d := diffListing(before, listing(t, r.root)); d != "+ "+mask {
			t.Errorf("uninstall: want the mask only, got:\n%s\n%s", d, out)
		}
	})
	t.Run("unit found before the first install", func(t *testing.T) {
		// As the Ansible role leaves it with gnsh_agent: false: its unit,
		// disabled and stopped, then gnsh install.
		r, o := setup(t)
		mkfile(t, r.root, UnitPath, string(installfiles.Unit()), 0o644)
		out := r.mustInstall(o)
		if enabled(r) || strings.Contains(out, "gnsh: started") {
			t.Errorf("the role's disabled agent was enabled or started:\n%s", out)
		}
		if out := r.mustInstall(o); out != NothingToChange+"\n" {
			t.Errorf("again: %q", out)
		}
	})
}

// TestLeftoversSwept: what an interrupted run left beside the recorded
// paths (files under their temporary names, the record as it found it)
// is removed first, and a run that then fails still puts the record back.
func TestLeftoversSwept(t *testing.T) {
	needTools(t)
	r := newRig(t, fakeDebian(t))
	r.mustInstall(r.opts(ModeDivert))
	installed := listing(t, r.root)
	state, err := os.ReadFile(filepath.Join(r.root, StatePath))
	if err != nil {
		t.Fatal(err)
	}
	left := []string{StatePrev, tmpName(StatePath), "/usr/sbin/reboot.distrib.gnsh-new", tmpName(UnitPath)}
	for _, p := range left {
		mkfile(t, r.root, p, "left\n", 0o600)
	}
	out := r.mustInstall(r.opts(ModeDivert))
	for _, p := range left {
		if p == "/usr/sbin/reboot.distrib.gnsh-new" {
			p = "/sbin/reboot.distrib.gnsh-new" // as recorded
		}
		if !strings.Contains(out, "gnsh: removed "+p+" (left by an interrupted gnsh run)\n") {
			t.Errorf("%s not removed:\n%s", p, out)
		}
	}
	if d := diffListing(installed, listing(t, r.root)); d != "" {
		t.Errorf("not as installed:\n%s", d)
	}
	// A stale record as found, then a failure: the record is put back.
	mkfile(t, r.root, StatePrev, "stale\n", 0o600)
	o := r.opts(ModeAlternatives)
	o.fail = func(desc string) error {
		if strings.HasPrefix(desc, "made /sbin/halt the alternatives link") {
			return errors.New("injected")
		}
		return nil
	}
	if out, err := r.install(o); err == nil || !strings.Contains(err.Error(), "every change before it was undone") {
		t.Fatalf("err %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(r.root, StatePath)); !bytes.Equal(got, state) {
		t.Errorf("the record is not as before:\n%s", got)
	}
	if d := diffListing(installed, listing(t, r.root)); d != "" {
		t.Errorf("not as installed:\n%s", d)
	}
}
