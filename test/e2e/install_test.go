//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/nodefacts"
)

// TestInstallE2E runs `gnsh install` and `gnsh uninstall` inside booted
// containers (systemd as PID 1, dpkg, sudo): every mode, what root's PATH,
// sudo's secure_path and the absolute paths then run, a reinstall of
// systemd-sysv under the diversion, the alternatives switch, and the
// exact file listing after uninstall; systemd's chroot refusal, and
// `reboot -f -n` with no D-Bus and no kubeconfig; a full /var/lib/gnsh;
// an admin's disable or mask of the agent kept.
func TestInstallE2E(t *testing.T) {
	suites := e2eSuites()
	gnsh := needGnsh(t)
	needRootfs(t, suites)
	cases := []struct {
		name string
		f    func(t *testing.T, c *container)
	}{
		{"modes", installModes},
		{"no_bus_force_reboot", noBusForceReboot},
		{"state_write_full_disk", stateWriteFullDisk},
		{"agent_kept", agentKept},
	}
	lane := make(chan struct{}, envInt("GNSH_E2E_PARALLEL", 2))
	var cw sync.WaitGroup
	for _, suite := range suites {
		for _, tc := range cases {
			cw.Add(1)
			go func() {
				defer cw.Done()
				lane <- struct{}{}
				defer func() { <-lane }()
				t.Run(suite+"/"+tc.name, func(t *testing.T) {
					rootfs, _, _ := rootfsFor(suite)
					dir := freshResults(t, "rig", "install", suite, tc.name)
					// gnsh install copies the binary it runs from: /rig/gnsh,
					// a copy in the case's rig dir (nothing bound over
					// /usr/local/sbin).
					if err := copyFile(gnsh, filepath.Join(dir, "rig", "gnsh")); err != nil {
						t.Fatal(err)
					}
					c := boot(t, suite, rootfs, dir, bootOpts{})
					tc.f(t, c)
				})
			}()
		}
	}
	cw.Wait()
}

// listingScript prints what uninstall must leave exactly as it found it.
const listingScript = `for d in /usr/sbin /sbin /usr/local/sbin /etc/systemd/system /etc/gnsh /var/lib/dpkg/alternatives /etc/alternatives /var/lib/gnsh; do
	if [ -e "$d" ]; then find "$d/" -printf '%p %M %u:%g %l\n' | sort; find "$d/" -type f -exec md5sum {} + | sort; else echo "$d absent"; fi
done
echo "== /var/lib/dpkg/diversions"; cat /var/lib/dpkg/diversions`

func (c *container) listing() string { return c.must("sh", "-c", listingScript).stdout }

// lineDiff lists the lines only in a (-) or only in b (+), the first 60
// of them.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	am, bm := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !bm[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !am[l] {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > 60 {
		out = append(out[:60], fmt.Sprintf("… %d more", len(out)-60))
	}
	return strings.Join(out, "\n")
}

func (c *container) gnshCmd(want int, args ...string) result {
	c.t.Helper()
	r := c.run(60*time.Second, append([]string{"/rig/gnsh"}, args...)...)
	if r.rc != want {
		c.t.Fatalf("gnsh %s: rc %d, want %d: %s", strings.Join(args, " "), r.rc, want, r)
	}
	return r
}

// resolved checks what each of the four commands runs: through root's
// PATH, through sudo (its secure_path) and, unless abs is "", by the
// absolute path systemd-sysv ships (/sbin/NAME).
func (c *container) resolved(t *testing.T, want, abs string) {
	t.Helper()
	for _, n := range nodefacts.LegacyCommands {
		got := map[string]string{
			"root's PATH": c.must("sh", "-c", `readlink -f "$(command -v `+n+`)"`).stdout,
			"sudo":        c.must("sudo", "-n", "sh", "-c", `readlink -f "$(command -v `+n+`)"`).stdout,
		}
		if abs != "" {
			got["/sbin/"+n] = c.must("readlink", "-f", "/sbin/"+n).stdout
		}
		for what, g := range got {
			w := want
			if what == "/sbin/"+n {
				w = abs
			}
			if g = strings.TrimSpace(g); g != w {
				t.Errorf("%s via %s runs %s, want %s", n, what, g, w)
			} else {
				c.logf("%s via %s runs %s", n, what, g)
			}
		}
	}
}

func installModes(t *testing.T, c *container) {
	before := c.listing()
	stock := c.must("readlink", "-f", "/sbin/reboot").stdout
	if strings.TrimSpace(stock) != "/usr/bin/systemctl" && strings.TrimSpace(stock) != "/bin/systemctl" {
		t.Fatalf("stock /sbin/reboot is %q", stock)
	}
	c.must("sudo", "-n", "true")

	// Stock systemd in a chroot, for the comparison below.
	mkChroot := `mkdir -p /tmp/cr && mount -t tmpfs cr /tmp/cr && cd /tmp/cr &&
		mkdir usr etc proc dev && mount --bind /usr usr && mount --bind /etc etc &&
		mount -t proc proc proc && mount --bind /dev dev &&
		for l in bin sbin lib lib64; do ln -s usr/$l $l; done`
	c.must("sh", "-c", mkChroot)
	stockChroot := c.run(30*time.Second, "chroot", "/tmp/cr", "/sbin/reboot")

	for _, mode := range []string{"divert", "alternatives", "symlink"} {
		out := c.gnshCmd(0, "install", "--mode", mode).stdout
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, "gnsh: ") {
				t.Errorf("install --mode %s: line %q", mode, l)
			}
		}
		if again := c.gnshCmd(0, "install", "--mode", mode).stdout; !strings.HasSuffix(again, "gnsh: nothing to change\n") {
			t.Errorf("install --mode %s again: %q", mode, again)
		}
		abs := "/usr/local/sbin/gnsh"
		if mode == "symlink" {
			abs = "/usr/bin/systemctl" // what --mode symlink does not switch
		}
		c.resolved(t, "/usr/local/sbin/gnsh", abs)
		if st := strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-active", "gnsh.service").stdout); st != "active" {
			t.Errorf("--mode %s: gnsh.service is %q, want active", mode, st)
		}
		if en := strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-enabled", "gnsh.service").stdout); en != "enabled" {
			t.Errorf("--mode %s: gnsh.service is %q, want enabled", mode, en)
		}
		switch mode {
		case "divert":
			// systemd-sysv reinstalled (the rootfs's own .deb, offline):
			// dpkg writes its links to the diverted names.
			r := c.run(120*time.Second, "sh", "-c", "dpkg -i /var/cache/gnsh-e2e/debs/systemd-sysv_*.deb")
			if r.rc != 0 {
				t.Errorf("dpkg -i systemd-sysv: %s", r)
			}
			c.resolved(t, "/usr/local/sbin/gnsh", "/usr/local/sbin/gnsh")
			if d := c.must("readlink", "/sbin/reboot.distrib").stdout; strings.TrimSpace(d) != "/bin/systemctl" {
				t.Errorf("after the reinstall /sbin/reboot.distrib is %q", d)
			}
			if l := c.must("dpkg-divert", "--list", "/sbin/reboot").stdout; !strings.Contains(l, "diversion of /sbin/reboot to /sbin/reboot.distrib by gnsh") {
				t.Errorf("dpkg-divert --list: %q", l)
			}
			// In a chroot, gnsh as reboot refuses exactly as systemd does.
			got := c.run(30*time.Second, "chroot", "/tmp/cr", "/sbin/reboot")
			if got.rc != stockChroot.rc || got.stdout != stockChroot.stdout || got.stderr != stockChroot.stderr {
				t.Errorf("reboot in a chroot: gnsh %s, stock %s", got, stockChroot)
			}
			if !strings.Contains(got.stdout+got.stderr, "Running in chroot, ignoring request.") || got.rc != 0 {
				t.Errorf("reboot in a chroot: %s", got)
			}
			if c.hasExited() {
				t.Fatal("the container went down")
			}
		case "alternatives":
			c.must("update-alternatives", "--set", "reboot", "/sbin/reboot.distrib")
			if got := strings.TrimSpace(c.must("readlink", "-f", "/sbin/reboot").stdout); got != "/usr/bin/systemctl" {
				t.Errorf("update-alternatives --set reboot /sbin/reboot.distrib: /sbin/reboot runs %s", got)
			}
			c.must("update-alternatives", "--auto", "reboot")
			if got := strings.TrimSpace(c.must("readlink", "-f", "/sbin/reboot").stdout); got != "/usr/local/sbin/gnsh" {
				t.Errorf("update-alternatives --auto reboot: /sbin/reboot runs %s", got)
			}
		case "symlink":
			if !strings.Contains(out, "warning: --mode symlink") {
				t.Errorf("no warning for --mode symlink:\n%s", out)
			}
			// A mode switch undoes symlink, then diverts.
			sw := c.gnshCmd(0, "install", "--mode", "divert").stdout
			if !strings.Contains(sw, "gnsh: removed /usr/local/sbin/reboot") || !strings.Contains(sw, "gnsh: diverted /sbin/reboot to /sbin/reboot.distrib") {
				t.Errorf("switch symlink → divert:\n%s", sw)
			}
			c.resolved(t, "/usr/local/sbin/gnsh", "/usr/local/sbin/gnsh")
		}
		un := c.gnshCmd(0, "uninstall").stdout
		if again := c.gnshCmd(0, "uninstall").stdout; again != "gnsh: nothing to change\n" {
			t.Errorf("uninstall again: %q", again)
		}
		if d := lineDiff(before, c.listing()); d != "" {
			t.Errorf("after install --mode %s and uninstall the listing differs:\n%s\nuninstall said:\n%s", mode, d, un)
		}
		if st := strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-active", "gnsh.service").stdout); st == "active" {
			t.Errorf("gnsh.service still active after uninstall")
		}
		c.resolved(t, "/usr/bin/systemctl", "/usr/bin/systemctl")
	}
	c.logf("stock reboot in a chroot: %s", stockChroot)

	// The switch by hand (the old README's ln -sf over /sbin/reboot …) is
	// undone by a systemd-sysv reinstall; gnsh doctor says so.
	c.must("sh", "-ec", `for n in shutdown poweroff reboot halt; do ln -sfn /rig/gnsh /sbin/$n; done`)
	if r := c.run(120*time.Second, "sh", "-c", "dpkg -i /var/cache/gnsh-e2e/debs/systemd-sysv_*.deb"); r.rc != 0 {
		t.Errorf("dpkg -i systemd-sysv: %s", r)
	}
	c.resolved(t, "/usr/bin/systemctl", "/usr/bin/systemctl")
	doc := c.run(60*time.Second, "/rig/gnsh", "doctor")
	if doc.rc != 1 || !regexp.MustCompile(`(?m)^fail +commands \(root\) +.*reboot`).MatchString(doc.stdout) {
		t.Errorf("gnsh doctor after systemd-sysv undid a hand-made switch: rc %d, want 1 and a failed commands (root) line:\n%s", doc.rc, doc.stdout)
	}
	if d := lineDiff(before, c.listing()); d != "" {
		t.Errorf("the reinstall did not restore the listing:\n%s", d)
	}
	c.in(10*time.Second, "umount", "-R", "/tmp/cr")
	c.terminate()
	c.waitExit(30 * time.Second)
}

// noBusForceReboot: dracut's `reboot -f -n`, or a rescue shell's: no D-Bus,
// no kubeconfig. gnsh (installed by gnsh install) reboots at once with
// reboot(2), as systemd does: the container exits 133.
func noBusForceReboot(t *testing.T, c *container) {
	c.gnshCmd(0, "install")
	c.must("sh", "-c", "rm -f /etc/kubernetes/kubelet.conf /etc/gnsh/kubeconfig; systemctl stop dbus.socket dbus.service")
	if r := c.in(10*time.Second, "busctl", "status"); r.rc == 0 {
		t.Fatalf("the system bus still answers: %s", r)
	}
	// The socket file stays (RemoveOnStop=no); connecting to it is refused.
	start := time.Now()
	r := c.run(30*time.Second, "env", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent", "reboot", "-f", "-n")
	if !c.waitExit(15 * time.Second) {
		t.Fatalf("the container did not go down: %s", r)
	}
	took := c.exitAt.Sub(start)
	c.logf("reboot -f -n with no bus: %s; nspawn exit %d after %v", r, c.exitCode, took.Round(time.Millisecond))
	if c.exitCode != 133 {
		t.Errorf("nspawn exit %d, want 133 (reboot)", c.exitCode)
	}
	if took > 5*time.Second {
		t.Errorf("down %v after reboot -f -n, want within 5 s", took)
	}
	if strings.Contains(r.stderr, "gnsh:") {
		t.Errorf("gnsh said something: %q", r.stderr)
	}
}

// stateWriteFullDisk: /var/lib/gnsh a tmpfs with no page left, then one
// (the record's first write fills it; the record as found keeps its own,
// so the second write fails for real): a mode switch and an uninstall each
// fail, having changed nothing, then stop after their first change
// (systemd's original put back; "stopped gnsh.service"), which is undone.
// Each time the commands still run gnsh, the agent runs and the listing
// is as before. Then, with room again, the uninstall ends as before gnsh.
func stateWriteFullDisk(t *testing.T, c *container) {
	c.must("mkdir", "-p", "/var/lib/gnsh")
	c.must("mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "gnsh-full", "/var/lib/gnsh")
	defer c.in(10*time.Second, "umount", "/var/lib/gnsh")
	pristine := c.listing()
	c.gnshCmd(0, "install")
	failed := regexp.MustCompile(`^gnsh: (?:un)?install (changed nothing|stopped after "[^"]*"): cannot write /var/lib/gnsh/install.json \(no space left on device\)(?:; every change was undone)?; fix: make /var/lib/gnsh writable \(free space, remount read-write\), then run gnsh (?:un)?install again\n$`)
	for free, want := range []string{"changed nothing", "stopped after"} {
		// Full but for free pages (a failed write may leave part of one: cut).
		c.must("sh", "-c", fmt.Sprintf(`f=/var/lib/gnsh/filler; rm -f $f; cat /dev/zero > $f 2>/dev/null; p=$(getconf PAGESIZE); s=$(stat -c %%s $f); truncate -s $(( s / p * p - %d * p )) $f`, free))
		before := c.listing()
		for _, args := range [][]string{{"install", "--mode", "alternatives"}, {"uninstall"}} {
			what := fmt.Sprintf("gnsh %s, %d pages free", strings.Join(args, " "), free)
			r := c.gnshCmd(1, args...)
			m := failed.FindStringSubmatch(r.stderr)
			if m == nil || !strings.HasPrefix(m[1], want) {
				t.Errorf("%s: stderr %q, want one line: %s …, every change undone", what, r.stderr, want)
			} else {
				c.logf("%s: %s", what, m[1])
			}
			if d := lineDiff(before, c.listing()); d != "" {
				t.Errorf("%s left:\n%s\noutput:\n%s", what, d, r.stdout)
			}
			c.resolved(t, "/usr/local/sbin/gnsh", "/usr/local/sbin/gnsh")
			if st := strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-active", "gnsh.service").stdout); st != "active" {
				t.Errorf("%s: gnsh.service is %q, want active", what, st)
			}
		}
	}
	c.must("rm", "/var/lib/gnsh/filler")
	c.gnshCmd(0, "uninstall")
	if d := lineDiff(pristine, c.listing()); d != "" {
		t.Errorf("uninstall with room again left:\n%s", d)
	}
}

// agentKept: a first gnsh install enables and starts the agent; disabled
// by the admin it stays disabled and stopped through gnsh install again
// and in another mode, and gnsh doctor warns that it is off. Masked
// before the first install, the mask is kept (no unit written over it,
// nothing started), and left by uninstall.
func agentKept(t *testing.T, c *container) {
	before := c.listing()
	state := func() (string, string) {
		return strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-enabled", "gnsh.service").stdout),
			strings.TrimSpace(c.in(10*time.Second, "systemctl", "is-active", "gnsh.service").stdout)
	}
	c.gnshCmd(0, "install")
	if en, act := state(); en != "enabled" || act != "active" {
		t.Fatalf("after a first install gnsh.service is %s, %s; want enabled, active", en, act)
	}
	c.must("systemctl", "disable", "--now", "gnsh.service")
	if out := c.gnshCmd(0, "install").stdout; out != "gnsh: nothing to change\n" {
		t.Errorf("install again, the agent disabled: %q", out)
	}
	c.gnshCmd(0, "install", "--mode", "alternatives")
	if en, act := state(); en != "disabled" || act != "inactive" {
		t.Errorf("after gnsh install again and in another mode, gnsh.service is %s, %s; want disabled, inactive", en, act)
	}
	doc := c.run(60*time.Second, "/rig/gnsh", "doctor")
	if !regexp.MustCompile(`(?m)^warn +agent +gnsh.service is disabled and inactive: the node agent is off`).MatchString(doc.stdout) {
		t.Errorf("gnsh doctor does not warn that the agent is off:\n%s", doc.stdout)
	}
	c.gnshCmd(0, "uninstall")
	if d := lineDiff(before, c.listing()); d != "" {
		t.Errorf("uninstall left:\n%s", d)
	}

	c.must("systemctl", "mask", "gnsh.service")
	masked := c.listing()
	out := c.gnshCmd(0, "install").stdout
	if !strings.Contains(out, "gnsh: note: gnsh.service is masked") {
		t.Errorf("install with the agent masked says nothing of it:\n%s", out)
	}
	if en, act := state(); en != "masked" || act != "inactive" {
		t.Errorf("install with the agent masked: gnsh.service is %s, %s; want masked, inactive", en, act)
	}
	c.resolved(t, "/usr/local/sbin/gnsh", "/usr/local/sbin/gnsh")
	doc = c.run(60*time.Second, "/rig/gnsh", "doctor")
	if !regexp.MustCompile(`(?m)^warn +agent +gnsh.service is masked and inactive: the node agent is off.*(\n +.*)*systemctl unmask gnsh.service`).MatchString(doc.stdout) {
		t.Errorf("gnsh doctor does not warn that the agent is masked:\n%s", doc.stdout)
	}
	c.gnshCmd(0, "uninstall")
	if d := lineDiff(masked, c.listing()); d != "" {
		t.Errorf("uninstall with the agent masked left:\n%s", d)
	}
	c.must("systemctl", "unmask", "gnsh.service")
	if d := lineDiff(before, c.listing()); d != "" {
		t.Errorf("after unmask:\n%s", d)
	}
}
