package pkgtest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// release runs install/package/release.sh for amd64 into a new directory
// (make release builds arm64 too) and returns it.
func release(t *testing.T, formats string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "release")
	cmd := exec.Command("sh", "install/package/release.sh", out)
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "GNSH_RELEASE_ARCHS=amd64", "GNSH_RELEASE_FORMATS="+formats)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	return out
}

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root(t)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(b))
}

// TestRelease: make release's files for amd64: the archive's listing,
// owners, modes and mtimes, its files against their sources, the binary
// static and saying its version, the packages holding the same binary,
// SHA256SUMS, and a second build giving the same archive.
func TestRelease(t *testing.T) {
	need(t, "git", "tar", "sha256sum", "go")
	r := root(t)
	cmd := exec.Command("sh", "install/package/version.sh")
	cmd.Dir = r
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("version.sh: %v", err)
	}
	version := strings.TrimSpace(string(b))
	commit := gitOut(t, "rev-parse", "--short=12", "HEAD")
	sec, _ := strconv.ParseInt(gitOut(t, "log", "-1", "--format=%ct"), 10, 64)
	mtime := time.Unix(sec, 0)

	formats := "tar deb rpm"
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		formats = "tar"
	}
	out := release(t, formats)
	top := "gnsh_" + version + "_linux_amd64"
	archive := filepath.Join(out, top+".tar.gz")

	// The archive: one directory, its files sorted, 0:0, the commit's date.
	want := []struct{ name, mode, src string }{
		{top + "/", "drwxr-xr-x", ""},
		{top + "/CHANGELOG.md", "-rw-r--r--", "CHANGELOG.md"},
		{top + "/LICENSE", "-rw-r--r--", "LICENSE"},
		{top + "/README.md", "-rw-r--r--", "README.md"},
		{top + "/config.yaml", "-rw-r--r--", "install/gnsh/config.yaml"},
		{top + "/gnsh", "-rwxr-xr-x", ""},
		{top + "/gnsh-config.5", "-rw-r--r--", ""},
		{top + "/gnsh-shutdown.8", "-rw-r--r--", ""},
		{top + "/gnsh.8", "-rw-r--r--", ""},
		{top + "/gnsh.service", "-rw-r--r--", "install/systemd/gnsh.service"},
		{top + "/rbac.yaml", "-rw-r--r--", "install/kubernetes/rbac.yaml"},
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if z.Name != "" || !z.ModTime.IsZero() {
		t.Errorf("gzip header: name %q, time %v: want neither (gzip -n)", z.Name, z.ModTime)
	}
	tr := tar.NewReader(z)
	files := map[string][]byte{}
	i := 0
	for ; ; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(want) {
			t.Errorf("extra entry %s", h.Name)
			continue
		}
		w := want[i]
		if h.Name != w.name {
			t.Errorf("entry %d: %s, want %s", i, h.Name, w.name)
		}
		if m := h.FileInfo().Mode().String(); m != w.mode {
			t.Errorf("%s: mode %s, want %s", h.Name, m, w.mode)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q), want 0:0 without names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(mtime) {
			t.Errorf("%s: mtime %v, want the commit's %v", h.Name, h.ModTime, mtime)
		}
		if h.Format != tar.FormatUSTAR {
			t.Errorf("%s: format %v, want ustar", h.Name, h.Format)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, top+"/")] = body
		if w.src != "" && !bytes.Equal(body, read(t, filepath.Join(r, w.src))) {
			t.Errorf("%s is not %s", h.Name, w.src)
		}
	}
	if i < len(want) {
		t.Errorf("the archive has %d entries, want %d", i, len(want))
	}
	for _, page := range []string{"gnsh.8", "gnsh-shutdown.8", "gnsh-config.5"} {
		if !regexp.MustCompile(`(?m)^\.TH \S+ [58] "" "gnsh ` + regexp.QuoteMeta(version) + `"`).Match(files[page]) {
			t.Errorf("%s: no .TH line with version %s", page, version)
		}
	}

	// The binary: static, and it says its version (gnsh version reads
	// nothing and changes nothing), the commit and its date stamped in.
	bin := filepath.Join(t.TempDir(), "gnsh")
	if err := os.WriteFile(bin, files["gnsh"], 0o755); err != nil {
		t.Fatal(err)
	}
	e, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("gnsh has an ELF interpreter: not static")
		}
	}
	if e.Machine != elf.EM_X86_64 {
		t.Errorf("gnsh is for %v, want x86-64", e.Machine)
	}
	e.Close()
	v, err := exec.Command(bin, "version").CombinedOutput()
	line := strings.TrimSuffix(string(v), "\n")
	if err != nil || line != "gnsh "+version && !strings.HasPrefix(line, "gnsh "+version+" (") {
		t.Errorf("gnsh version: %q (%v), want gnsh %s", v, err, version)
	}
	// With the commit and its date (-ldflags -X), where it prints them.
	stamped := regexp.MustCompile(`^gnsh ` + regexp.QuoteMeta(version) + ` \(commit ` + commit + `(-dirty)?, ` + mtime.UTC().Format("2006-01-02") + `, `)
	if strings.Contains(line, "(") && !stamped.MatchString(line) {
		t.Errorf("gnsh version: %q, want the commit %s and its date %s", line, commit, mtime.UTC().Format("2006-01-02"))
	}

	// The packages: this version, this binary.
	if strings.Contains(formats, "deb") {
		deb := filepath.Join(out, "gnsh_"+version+"-1_amd64.deb")
		if v := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Version")); v != version+"-1" {
			t.Errorf("deb Version %q, want %s-1", v, version)
		}
		x := t.TempDir()
		run(t, "dpkg-deb", "-x", deb, x)
		if !bytes.Equal(read(t, filepath.Join(x, "usr/sbin/gnsh")), files["gnsh"]) {
			t.Errorf("the .deb's /usr/sbin/gnsh is not the archive's gnsh")
		}
		if _, err := os.Stat(filepath.Join(out, "gnsh-"+version+"-1.x86_64.rpm")); err != nil {
			t.Errorf("no .rpm: %v", err)
		}
	}

	// SHA256SUMS: every other file of the release, sorted, and right.
	var names []string
	ents, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "SHA256SUMS" {
			names = append(names, e.Name())
		}
	}
	if len(names) != len(strings.Fields(formats)) {
		t.Errorf("release files %v, want one for each of %q", names, formats)
	}
	sums := string(read(t, filepath.Join(out, "SHA256SUMS")))
	var listed []string
	sc := bufio.NewScanner(strings.NewReader(sums))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Errorf("SHA256SUMS line %q", sc.Text())
			continue
		}
		listed = append(listed, name)
		h := sha256.Sum256(read(t, filepath.Join(out, name)))
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s %s, the file's is %x", name, sum, h)
		}
	}
	if strings.Join(listed, " ") != strings.Join(names, " ") {
		t.Errorf("SHA256SUMS lists %v, want %v (sorted)", listed, names)
	}
	c := exec.Command("sha256sum", "-c", "--strict", "SHA256SUMS")
	c.Dir = out
	if b, err := c.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, b)
	}

	// Reproducible: the archive of a second build is the same file.
	again := release(t, "tar")
	if !bytes.Equal(read(t, filepath.Join(again, top+".tar.gz")), read(t, archive)) {
		t.Errorf("a second build of the archive differs from the first")
	}
}

// TestRoleVersion: the Ansible role installs the release of VERSION by
// default.
func TestRoleVersion(t *testing.T) {
	r := root(t)
	v := strings.TrimSpace(string(read(t, filepath.Join(r, "VERSION"))))
	d := string(read(t, filepath.Join(r, "install/ansible/roles/gnsh/defaults/main.yml")))
	if !regexp.MustCompile(`(?m)^gnsh_version: "` + regexp.QuoteMeta(v) + `"$`).MatchString(d) {
		t.Errorf("install/ansible/roles/gnsh/defaults/main.yml: want gnsh_version: %q, the VERSION file's", v)
	}
}
