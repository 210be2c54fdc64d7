// Package pkgtest builds gnsh's .deb and .rpm with install/package/build.sh
// and inspects them without installing them on this machine: dpkg-deb for
// the .deb; Debian's rpm for the .rpm (its scriptlets and triggers, rpm -K,
// and an install into a scratch --root with --noscripts --notriggers). The
// packages are installed for real only in containers: test/e2e's
// TestPackageE2E.
package pkgtest

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const version = "1.2.3+test"

var (
	buildOnce sync.Once
	pkgDir    string
	buildErr  string
)

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
				t.Fatalf("%s not installed (make deps)", tool)
			}
			t.Skipf("%s not installed (make deps)", tool)
		}
	}
}

// packages builds both packages once, version 1.2.3+test.
func packages(t *testing.T) (deb, rpm string) {
	t.Helper()
	r := root(t)
	if _, err := os.Stat(filepath.Join(r, "bin", "gnsh")); err != nil {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatal("bin/gnsh missing: make build")
		}
		t.Skip("bin/gnsh missing: make build")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gnsh-pkg-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		pkgDir = dir
		cmd := exec.Command("sh", "install/package/build.sh", dir)
		cmd.Dir = r
		cmd.Env = append(os.Environ(), "GNSH_PKG_VERSION="+version, "GNSH_PKG_ARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err.Error() + "\n" + string(out)
		}
	})
	if buildErr != "" {
		t.Fatalf("build.sh: %s", buildErr)
	}
	deb = filepath.Join(pkgDir, "gnsh_"+version+"-1_amd64.deb")
	rpm = filepath.Join(pkgDir, "gnsh-"+version+"-1.x86_64.rpm")
	for _, p := range []string{deb, rpm} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("package not built: %v", err)
		}
	}
	return deb, rpm
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pkgDir != "" {
		os.RemoveAll(pkgDir)
	}
	os.Exit(code)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// files in the packages (both), path -> mode; the unit's path differs.
var wantFiles = map[string]string{
	"/usr/sbin/gnsh":                         "-rwxr-xr-x",
	"/etc/gnsh/config.yaml":                  "-rw-r--r--",
	"/usr/share/man/man8/gnsh.8.gz":          "-rw-r--r--",
	"/usr/share/man/man8/gnsh-shutdown.8.gz": "-rw-r--r--",
	"/usr/share/man/man5/gnsh-config.5.gz":   "-rw-r--r--",
	"/usr/share/doc/gnsh/rbac.yaml":          "-rw-r--r--",
	"/usr/share/doc/gnsh/rbac.md":            "-rw-r--r--",
	"/usr/share/doc/gnsh/config.yaml":        "-rw-r--r--",
	"/usr/share/doc/gnsh/README.md":          "-rw-r--r--",
	"/usr/share/doc/gnsh/copyright":          "-rw-r--r--",
}

func withUnit(unit string) map[string]string {
	m := map[string]string{unit: "-rw-r--r--"}
	for k, v := range wantFiles {
		m[k] = v
	}
	return m
}

func diffSets(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: %s: got %q, want %q", what, k, got[k], want[k])
		}
	}
}

// checkTree compares an unpacked package (below dir) with the sources.
func checkTree(t *testing.T, dir, unit string) {
	t.Helper()
	r := root(t)
	if !bytes.Equal(read(t, filepath.Join(dir, "usr/sbin/gnsh")), read(t, filepath.Join(r, "bin/gnsh"))) {
		t.Errorf("/usr/sbin/gnsh is not bin/gnsh")
	}
	for dst, src := range map[string]string{
		"etc/gnsh/config.yaml":           "install/gnsh/config.yaml",
		"usr/share/doc/gnsh/config.yaml": "install/gnsh/config.yaml",
		"usr/share/doc/gnsh/rbac.yaml":   "install/kubernetes/rbac.yaml",
		"usr/share/doc/gnsh/copyright":   "LICENSE",
	} {
		if !bytes.Equal(read(t, filepath.Join(dir, dst)), read(t, filepath.Join(r, src))) {
			t.Errorf("/%s is not %s", dst, src)
		}
	}
	// The unit: the single source with ExecStart naming /usr/sbin/gnsh,
	// nothing else changed.
	got := strings.Split(string(read(t, filepath.Join(dir, unit))), "\n")
	src := strings.Split(string(read(t, filepath.Join(r, "install/systemd/gnsh.service"))), "\n")
	if len(got) != len(src) {
		t.Fatalf("%s: %d lines, source %d", unit, len(got), len(src))
	}
	changed := 0
	for i := range got {
		if got[i] == src[i] {
			continue
		}
		changed++
		if src[i] != "ExecStart=/usr/local/sbin/gnsh agent" || got[i] != "ExecStart=/usr/sbin/gnsh agent" {
			t.Errorf("%s line %d: %q, source %q", unit, i+1, got[i], src[i])
		}
	}
	if changed != 1 {
		t.Errorf("%s: %d lines differ from the source, want the ExecStart line only", unit, changed)
	}
	for _, page := range []string{"man8/gnsh.8.gz", "man8/gnsh-shutdown.8.gz", "man5/gnsh-config.5.gz"} {
		f, err := os.Open(filepath.Join(dir, "usr/share/man", page))
		if err != nil {
			t.Fatal(err)
		}
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		b, _ := io.ReadAll(z)
		f.Close()
		if !regexp.MustCompile(`(?m)^\.TH \S+ [58] "" "gnsh ` + regexp.QuoteMeta(version) + `"`).Match(b) {
			t.Errorf("%s: no .TH line with version %s", page, version)
		}
	}
}

// scripts every package script must satisfy: POSIX sh (sh -n), set -e,
// exit 0 at the end.
func checkScript(t *testing.T, name, body string) {
	t.Helper()
	cmd := exec.Command("sh", "-n")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: sh -n: %v %s", name, err, out)
	}
	if !regexp.MustCompile(`(?m)^set -e$`).MatchString(body) || !strings.HasSuffix(strings.TrimSpace(body), "exit 0") {
		t.Errorf("%s: want set -e and a final exit 0:\n%s", name, body)
	}
	if strings.Contains(body, "/usr/local/sbin/gnsh") {
		t.Errorf("%s names /usr/local/sbin/gnsh", name)
	}
}

func TestDeb(t *testing.T) {
	need(t, "dpkg-deb")
	deb, _ := packages(t)
	r := root(t)

	// Contents: the files with their modes, directories aside.
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		if f[1] != "root/root" {
			t.Errorf("%s owned by %s", f[5], f[1])
		}
		got[strings.TrimPrefix(f[5], ".")] = f[0]
	}
	diffSets(t, "deb contents", got, withUnit("/lib/systemd/system/gnsh.service"))

	// Control.
	for field, want := range map[string]string{
		"Package": "gnsh", "Version": version + "-1", "Architecture": "amd64", "Depends": "systemd", "Section": "admin",
	} {
		if v := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, field)); v != want {
			t.Errorf("control %s: %q, want %q", field, v, want)
		}
	}
	ctl := t.TempDir()
	run(t, "dpkg-deb", "-e", deb, ctl)
	if c := string(read(t, filepath.Join(ctl, "conffiles"))); c != "/etc/gnsh/config.yaml\n" {
		t.Errorf("conffiles: %q", c)
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		body := string(read(t, filepath.Join(ctl, s)))
		if body != string(read(t, filepath.Join(r, "install/package/deb", s))) {
			t.Errorf("%s is not install/package/deb/%s", s, s)
		}
		if st, _ := os.Stat(filepath.Join(ctl, s)); st.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v", s, st.Mode())
		}
		checkScript(t, s, body)
	}
	for _, s := range []string{"preinst"} {
		if _, err := os.Stat(filepath.Join(ctl, s)); err == nil {
			t.Errorf("unexpected %s", s)
		}
	}
	// The contract with gnsh install/uninstall.
	post := string(read(t, filepath.Join(ctl, "postinst")))
	if !strings.Contains(post, "\nconfigure|abort-upgrade|abort-remove|abort-deconfigure)\n\t/usr/sbin/gnsh install --packaged\n") {
		t.Errorf("postinst: configure does not run gnsh install --packaged first")
	}
	// The agent: enabled by a first configure only (an admin's disable or
	// mask stays through upgrades); a failed uninstall leaves it as it is,
	// and a removal keeps its enablement for a reinstall.
	if !strings.Contains(post, `if [ "$1" = configure ] && [ -z "$2" ] && `) || strings.Count(post, "systemctl enable") != 2 {
		t.Errorf("postinst: systemctl enable not only on a first configure:\n%s", post)
	}
	prerm := string(read(t, filepath.Join(ctl, "prerm")))
	if !regexp.MustCompile(`(?s)\nremove\|deconfigure\)\n\t/usr/sbin/gnsh uninstall --packaged\n[^*]*\t;;\n\*\)\n\t;;`).MatchString(prerm) ||
		strings.Contains(prerm, "systemctl disable") {
		t.Errorf("prerm: remove|deconfigure does not start with gnsh uninstall --packaged, disables the agent, or another branch does something:\n%s", prerm)
	}
	tree := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, tree)
	checkTree(t, tree, "lib/systemd/system/gnsh.service")
}

func TestRPM(t *testing.T) {
	need(t, "rpm")
	_, rpm := packages(t)
	r := root(t)

	if out := run(t, "rpm", "-K", rpm); !strings.Contains(out, "digests OK") {
		t.Errorf("rpm -K: %s", out)
	}
	if v := run(t, "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH} %{LICENSE}", rpm); v != "gnsh "+version+" 1 x86_64 Apache-2.0" {
		t.Errorf("rpm header: %q", v)
	}
	if req := run(t, "rpm", "-qp", "--requires", rpm); !regexp.MustCompile(`(?m)^systemd$`).MatchString(req) {
		t.Errorf("requires: %q", req)
	}
	// rpm -qpl, with modes and %config(noreplace).
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(run(t, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILEFLAGS:fflags}: %{FILENAMES}\n]`, rpm)), "\n") {
		mode, rest, _ := strings.Cut(l, " ")
		flags, name, _ := strings.Cut(rest, ": ")
		if strings.HasPrefix(mode, "d") {
			continue
		}
		got[name] = mode
		if (name == "/etc/gnsh/config.yaml") != (flags == "cn") {
			t.Errorf("%s: flags %q (want cn = %%config(noreplace) for the config file only)", name, flags)
		}
	}
	diffSets(t, "rpm contents", got, withUnit("/usr/lib/systemd/system/gnsh.service"))
	l := strings.Fields(run(t, "rpm", "-qpl", rpm))
	if len(l) != len(got) {
		t.Errorf("rpm -qpl lists %d, --qf %d", len(l), len(got))
	}

	// Scriptlets: exactly install/package/rpm/*, each set off by rpm's header.
	scripts := run(t, "rpm", "-qp", "--scripts", rpm)
	for slot, file := range map[string]string{
		"postinstall": "post", "posttrans": "posttrans", "preuninstall": "preun", "postuninstall": "postun",
	} {
		body := string(read(t, filepath.Join(r, "install/package/rpm", file)))
		if !strings.Contains(scripts, slot+" scriptlet (using /bin/sh):\n"+body) {
			t.Errorf("rpm %s is not install/package/rpm/%s:\n%s", slot, file, scripts)
		}
		checkScript(t, file, body)
	}
	if strings.Contains(scripts, "preinstall scriptlet") || strings.Contains(scripts, "pretrans scriptlet") {
		t.Errorf("unexpected preinstall/pretrans:\n%s", scripts)
	}
	if !strings.Contains(string(read(t, filepath.Join(r, "install/package/rpm/posttrans"))), "\nset -e\n/usr/sbin/gnsh install --packaged\n") {
		t.Errorf("posttrans does not run gnsh install --packaged first")
	}
	if !regexp.MustCompile(`(?s)\nif \[ "\$1" -eq 0 \]; then\n\t/usr/sbin/gnsh uninstall --packaged\n.*\nfi\nexit 0\n$`).MatchString(string(read(t, filepath.Join(r, "install/package/rpm/preun")))) {
		t.Errorf("preun: gnsh uninstall --packaged not first, under $1 -eq 0")
	}

	// Triggers on systemd.
	trig := string(read(t, filepath.Join(r, "install/package/rpm/trigger-systemd")))
	checkScript(t, "trigger-systemd", trig)
	want := "triggerin scriptlet (using /bin/sh) -- systemd\n" + trig + "\ntriggerpostun scriptlet (using /bin/sh) -- systemd\n" + trig + "\n"
	if got := run(t, "rpm", "-qp", "--triggers", rpm); got != want {
		t.Errorf("rpm -qp --triggers:\n%s\nwant:\n%s", got, want)
	}

	// A scratch root, no scriptlets, no triggers.
	sr := t.TempDir()
	db := "/var/lib/rpm"
	run(t, "rpm", "--root", sr, "--dbpath", db, "--initdb")
	run(t, "rpm", "--root", sr, "--dbpath", db, "-i", "--noscripts", "--notriggers", "--nodeps", rpm)
	if q := strings.TrimSpace(run(t, "rpm", "--root", sr, "--dbpath", db, "-qa")); q != "gnsh-"+version+"-1.x86_64" {
		t.Errorf("rpm -qa in the scratch root: %q", q)
	}
	tree := map[string]string{}
	filepath.Walk(sr, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || strings.HasPrefix(p, filepath.Join(sr, "var/lib/rpm")) {
			return err
		}
		tree[strings.TrimPrefix(p, sr)] = fi.Mode().String()
		return nil
	})
	diffSets(t, "scratch root", tree, withUnit("/usr/lib/systemd/system/gnsh.service"))
	checkTree(t, sr, "usr/lib/systemd/system/gnsh.service")
}

// TestVersion: version.sh's version from the VERSION file and git, its
// -ldflags, and that dpkg and rpm order the versions as the commits.
func TestVersion(t *testing.T) {
	need(t, "git")
	script := filepath.Join(root(t), "install/package/version.sh")
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	script1 := func(in string, args ...string) (string, error) {
		cmd := exec.Command("sh", append([]string{script}, args...)...)
		cmd.Dir = in
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			return errb.String(), err
		}
		return strings.TrimSpace(string(out)), nil
	}
	ver := func() string {
		t.Helper()
		out, err := script1(dir)
		if err != nil {
			t.Fatalf("version.sh: %v: %s", err, out)
		}
		return out
	}
	hash := func(n int) string {
		cmd := exec.Command("git", "rev-parse", "--short="+strconv.Itoa(n), "HEAD")
		cmd.Dir = dir
		out, _ := cmd.Output()
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var seq []string
	check := func(want string) {
		t.Helper()
		if got := ver(); got != want {
			t.Errorf("version.sh = %q, want %q", got, want)
		}
		seq = append(seq, want)
	}

	// Not a git checkout (a source archive): VERSION as it is.
	write("VERSION", "0.1.0\n")
	if got := ver(); got != "0.1.0" {
		t.Errorf("version.sh outside git = %q, want 0.1.0", got)
	}
	git("init", "-q")
	write("f", "1")
	git("add", "f")
	git("commit", "-q", "-m", "before VERSION")
	// VERSION not committed yet: every commit counts, and the tree is dirty.
	check("0.1.0+git1.g" + hash(7) + ".dirty")
	git("add", "VERSION")
	git("commit", "-q", "-m", "0.1.0")
	check("0.1.0")
	write("f", "2")
	check("0.1.0+git0.g" + hash(7) + ".dirty")
	git("commit", "-q", "-am", "2")
	check("0.1.0+git1.g" + hash(7))
	write("untracked", "x")
	check("0.1.0+git1.g" + hash(7) + ".dirty")
	os.Remove(filepath.Join(dir, "untracked"))
	for i := 3; i <= 12; i++ {
		write("f", strconv.Itoa(i))
		git("commit", "-q", "-am", strconv.Itoa(i))
	}
	check("0.1.0+git11.g" + hash(7))
	// The release tagged on a later commit is VERSION too (not in the
	// ordered sequence: the commits before the tag are numbered from the
	// one that set VERSION), and so is nothing after it.
	git("tag", "v0.1.0")
	if got := ver(); got != "0.1.0" {
		t.Errorf("version.sh on the commit tagged v0.1.0 = %q, want 0.1.0", got)
	}
	write("f", "x")
	if got := ver(); got != "0.1.0+git11.g"+hash(7)+".dirty" {
		t.Errorf("version.sh on the tagged commit, dirty = %q, want 0.1.0+git11.g%s.dirty", got, hash(7))
	}
	git("commit", "-q", "-am", "after the tag")
	check("0.1.0+git12.g" + hash(7))
	git("tag", "v9.9.9") // another version's tag: not this one's release
	if got := ver(); got != "0.1.0+git12.g"+hash(7) {
		t.Errorf("version.sh on a commit tagged v9.9.9 = %q, want 0.1.0+git12.g%s", got, hash(7))
	}
	write("VERSION", "0.1.1\n")
	git("commit", "-q", "-am", "0.1.1")
	check("0.1.1")
	write("f", "13")
	git("commit", "-q", "-am", "13")
	check("0.1.1+git1.g" + hash(7))
	write("VERSION", "0.10.0\n")
	git("commit", "-q", "-am", "0.10.0")
	check("0.10.0")

	// -ldflags: the version given (or this one), the commit, its date in UTC.
	want := "-s -w -X github.com/gnsh/gnsh/internal/version.Version=%s -X github.com/gnsh/gnsh/internal/version.Commit=" + hash(12) +
		" -X github.com/gnsh/gnsh/internal/version.Date=%s"
	date := func() string {
		cmd := exec.Command("git", "log", "-1", "--format=%ct")
		cmd.Dir = dir
		out, _ := cmd.Output()
		sec, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		return time.Unix(sec, 0).UTC().Format("2006-01-02")
	}()
	for _, c := range []struct {
		args []string
		v    string
	}{{[]string{"-ldflags"}, "0.10.0"}, {[]string{"-ldflags", "9.9.9"}, "9.9.9"}} {
		if got, err := script1(dir, c.args...); err != nil || got != fmt.Sprintf(want, c.v, date) {
			t.Errorf("version.sh %v = %q (%v), want %q", c.args, got, err, fmt.Sprintf(want, c.v, date))
		}
	}

	// Not a release version: refused, in one line naming the file.
	for _, bad := range []string{"v0.2.0", "0.2", "0.2.0-rc.1", "0.2.0.1", "", "0..1"} {
		write("VERSION", bad+"\n")
		if out, err := script1(dir); err == nil || !strings.Contains(out, "VERSION holds") || strings.Count(out, "\n") != 1 {
			t.Errorf("VERSION %q: version.sh = %q, %v; want a one-line refusal", bad, out, err)
		}
	}

	// Each later than the one before (the dirty ones aside), for dpkg and rpm.
	var order []string
	for _, v := range seq {
		if !strings.HasSuffix(v, ".dirty") {
			order = append(order, v)
		}
	}
	// Numbers compare as numbers: git2 before git11, whatever the hashes.
	order = append(order[:2:2], append([]string{"0.1.0+git2.gfffffff"}, order[2:]...)...)
	if _, err := exec.LookPath("dpkg"); err == nil {
		for i := 1; i < len(order); i++ {
			if err := exec.Command("dpkg", "--compare-versions", order[i-1], "lt", order[i]).Run(); err != nil {
				t.Errorf("dpkg: %s is not older than %s", order[i-1], order[i])
			}
		}
	}
	if _, err := exec.LookPath("rpm"); err == nil {
		for i := 1; i < len(order); i++ {
			out, err := exec.Command("rpm", "--eval", fmt.Sprintf("%%{lua: print(rpm.vercmp(%q, %q))}", order[i-1], order[i])).Output()
			if err != nil || strings.TrimSpace(string(out)) != "-1" {
				t.Errorf("rpm: %s is not older than %s (%q, %v)", order[i-1], order[i], out, err)
			}
		}
	}
}
