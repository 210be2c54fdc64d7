//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPackageE2E installs gnsh's .deb (install/package/build.sh) inside a
// booted container per suite (never on the host: its maintainer scripts
// switch reboot): dpkg -i, an upgrade to a higher version, upgrades and a
// downgrade with the agent disabled or masked, a removal and reinstall,
// dpkg --purge, and checks what each leaves behind against what was there
// before.
//
// The postinst runs `gnsh install --packaged` (divert on Debian), the
// prerm `gnsh uninstall --packaged`.
func TestPackageE2E(t *testing.T) {
	suites := e2eSuites()
	bin, skip := gnshBinary()
	if skip != "" {
		t.Skip(skip)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// build.sh packages ../../bin/gnsh: it must be the binary under test.
	if b, _ := filepath.Abs(filepath.Join(repo, "bin", "gnsh")); b != bin {
		t.Skipf("GNSH_BIN=%s: the packages are built from %s only", bin, b)
	}
	pkgs := filepath.Join(resultsRoot, "packages")
	vs := []string{"1.0.0+e2e1", "1.0.0+e2e2", "1.0.0+e2e3"}
	for _, v := range vs {
		cmd := exec.Command("sh", "install/package/build.sh", pkgs)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GNSH_PKG_VERSION="+v, "GNSH_PKG_FORMATS=deb")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build.sh %s: %v\n%s", v, err, out)
		}
	}
	for _, suite := range suites {
		t.Run(suite, func(t *testing.T) {
			t.Parallel()
			packageCase(t, suite, pkgs, vs)
		})
	}
}

// snapshot lists what the package may touch: every entry of /usr/sbin,
// /sbin and /etc/systemd/system (type, mode, link target, and the md5sum
// of regular files; not sizes: a directory's changes on the overlay) and
// dpkg's diversions.
const snapshotScript = `set -e
for d in /usr/sbin/ /sbin/ /etc/systemd/system/; do
	find "$d" -printf '%p %y %m %l\n'
	find "$d" -type f -exec md5sum {} +
done | LC_ALL=C sort
echo '--- /var/lib/dpkg/diversions'
cat /var/lib/dpkg/diversions`

var legacyNames = []string{"shutdown", "poweroff", "reboot", "halt"}

func packageCase(t *testing.T, suite, pkgs string, vs []string) {
	v1, v2, v3 := vs[0], vs[1], vs[2]
	rootfs, _, err := rootfsFor(suite)
	if err != nil {
		t.Fatal(err)
	}
	dir := freshResults(t, "rig", suite, "package")
	for _, v := range vs {
		name := "gnsh_" + v + "-1_amd64.deb"
		if err := copyFile(filepath.Join(pkgs, name), filepath.Join(dir, "rig", name)); err != nil {
			t.Fatal(err)
		}
	}
	c := boot(t, suite, rootfs, dir, bootOpts{})
	snap := func(name string) string {
		s := c.must("sh", "-c", snapshotScript).stdout
		mustWrite(t, filepath.Join(dir, "snapshot-"+name+".txt"), s)
		return s
	}
	resolve := func(name string) string {
		return strings.TrimSpace(c.must("sh", "-c", `readlink -f "$(command -v `+name+`)"`).stdout)
	}
	before := snap("before")
	for _, n := range legacyNames {
		if r := resolve(n); r != "/usr/bin/systemctl" && r != "/bin/systemctl" {
			t.Fatalf("stock %s resolves to %s, not systemctl", n, r)
		}
	}

	// Install.
	r := c.run(2*time.Minute, "dpkg", "-i", "/rig/gnsh_"+v1+"-1_amd64.deb")
	if r.rc != 0 {
		t.Fatalf("dpkg -i %s: %s", v1, r)
	}
	checkInstalled(t, c, v1, resolve, "enabled")

	// A local edit of the conffile survives the upgrade.
	c.must("sh", "-c", "echo '# local edit' >> /etc/gnsh/config.yaml")

	// Upgrade: the agent is restarted on the new binary.
	pid := func() string { return c.must("systemctl", "show", "-p", "MainPID", "gnsh.service").stdout }
	pid1 := pid()
	if r := c.run(2*time.Minute, "dpkg", "-i", "/rig/gnsh_"+v2+"-1_amd64.deb"); r.rc != 0 {
		t.Fatalf("dpkg -i %s (upgrade): %s", v2, r)
	}
	checkInstalled(t, c, v2, resolve, "enabled")
	if pid2 := pid(); pid2 == pid1 {
		t.Errorf("gnsh.service not restarted by the upgrade (%s)", strings.TrimSpace(pid2))
	}
	if !strings.Contains(c.must("cat", "/etc/gnsh/config.yaml").stdout, "# local edit") {
		t.Errorf("the upgrade replaced the edited /etc/gnsh/config.yaml")
	}

	// The agent disabled by the admin: an upgrade keeps it disabled and
	// stopped; masked, a downgrade keeps it masked (and configures); after
	// a removal, a reinstall keeps it disabled.
	c.must("systemctl", "disable", "--now", "gnsh.service")
	if r := c.run(2*time.Minute, "dpkg", "-i", "/rig/gnsh_"+v3+"-1_amd64.deb"); r.rc != 0 {
		t.Fatalf("dpkg -i %s (upgrade, the agent disabled): %s", v3, r)
	}
	checkInstalled(t, c, v3, resolve, "disabled")
	c.must("systemctl", "mask", "gnsh.service")
	if r := c.run(2*time.Minute, "dpkg", "-i", "/rig/gnsh_"+v2+"-1_amd64.deb"); r.rc != 0 {
		t.Fatalf("dpkg -i %s (downgrade, the agent masked): %s", v2, r)
	}
	checkInstalled(t, c, v2, resolve, "masked")
	c.must("systemctl", "unmask", "gnsh.service")
	if r := c.run(2*time.Minute, "dpkg", "-r", "gnsh"); r.rc != 0 {
		t.Fatalf("dpkg -r gnsh: %s", r)
	}
	if r := c.run(2*time.Minute, "dpkg", "-i", "/rig/gnsh_"+v3+"-1_amd64.deb"); r.rc != 0 {
		t.Fatalf("dpkg -i %s (reinstall after removal, the agent disabled): %s", v3, r)
	}
	checkInstalled(t, c, v3, resolve, "disabled")
	c.must("systemctl", "enable", "--now", "gnsh.service")

	// Purge.
	if r := c.run(2*time.Minute, "dpkg", "--purge", "gnsh"); r.rc != 0 {
		t.Fatalf("dpkg --purge gnsh: %s", r)
	}
	after := snap("after-purge")
	if after != before {
		t.Errorf("after dpkg --purge, /usr/sbin, /sbin, /etc/systemd/system or the diversions differ from before the install:\n%s",
			lineDiff(before, after))
	}
	for _, p := range []string{"/etc/gnsh/config.yaml", "/etc/gnsh", "/usr/sbin/gnsh", "/lib/systemd/system/gnsh.service"} {
		if c.in(5*time.Second, "test", "-e", p).rc == 0 {
			t.Errorf("%s left after the purge", p)
		}
	}
	if r := c.in(10*time.Second, "systemctl", "is-active", "gnsh.service"); strings.TrimSpace(r.stdout) == "active" {
		t.Errorf("gnsh.service still active after the purge")
	}
	if r := c.in(10*time.Second, "dpkg-divert", "--list"); strings.Contains(r.stdout, " by gnsh") {
		t.Errorf("diversions by gnsh left: %s", r.stdout)
	}
}

// checkInstalled: version v configured, the four commands diverted to
// gnsh, the agent's unit in state enabled (and then active from
// /usr/sbin/gnsh), or disabled or masked (and inactive), conffile there.
func checkInstalled(t *testing.T, c *container, v string, resolve func(string) string, enabled string) {
	t.Helper()
	if s := c.must("dpkg-query", "-W", "-f", "${Status} ${Version}", "gnsh").stdout; s != "install ok installed "+v+"-1" {
		t.Errorf("dpkg-query: %q", s)
	}
	div := c.must("dpkg-divert", "--list").stdout
	c.logf("dpkg-divert --list:\n%s", div)
	for _, n := range legacyNames {
		if !regexp.MustCompile(`(?m)^diversion of (/usr)?/sbin/` + n + ` to \S+ by gnsh$`).MatchString(div) {
			t.Errorf("%s: no diversion by gnsh in dpkg-divert --list", n)
		}
		if got := resolve(n); got != "/usr/sbin/gnsh" {
			t.Errorf("%s resolves to %s, not /usr/sbin/gnsh", n, got)
		}
	}
	if s := strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-enabled", "gnsh.service").stdout); s != enabled {
		t.Errorf("gnsh.service is-enabled: %q, want %q", s, enabled)
	}
	c.must("test", "-f", "/etc/gnsh/config.yaml")
	c.must("test", "-f", "/usr/share/man/man8/gnsh.8.gz")
	if enabled != "enabled" {
		if s := strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-active", "gnsh.service").stdout); s != "inactive" {
			t.Errorf("gnsh.service (%s) is-active: %q, want inactive", enabled, s)
		}
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-active", "gnsh.service").stdout)
		if s == "active" {
			break
		}
		if time.Now().After(deadline) {
			j := c.in(10*time.Second, "journalctl", "-u", "gnsh.service", "--no-pager", "-n", "30")
			t.Errorf("gnsh.service is-active: %q\n%s", s, j.stdout)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if s := c.must("systemctl", "show", "-p", "ExecStart", "gnsh.service").stdout; !strings.Contains(s, "path=/usr/sbin/gnsh ;") {
		t.Errorf("gnsh.service ExecStart: %s", s)
	}
}
