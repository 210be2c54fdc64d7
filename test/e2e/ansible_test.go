//go:build e2e

package e2e

// The Ansible role install/ansible/roles/gnsh, applied for real: the host
// runs ansible-playbook (install/ansible/site.yml) over ssh against Debian
// 11 and 12 nodes booted in nspawn containers, each a Node of a local
// control plane. ansible-playbook never targets the host: the inventory
// names only 127.0.0.1:PORT, where PORT is the container's own sshd
// (checked before every play: the listening socket belongs to a process
// in the container's PID namespace, ssh pins the container's host key and
// reads the container's boot ID). The only tasks that run on the host are
// the role's kubectl tasks (delegate_to: localhost, with the control
// plane's admin kubeconfig named explicitly).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	saUser = "system:serviceaccount:kube-system:gnsh" // install/kubernetes/rbac.yaml's identity
)

var ansibleCP = &sharedCP{}

// ansibleTools installs ansible-core, ansible-lint, yamllint and
// openssh-client on the host once (Debian packages), if one is missing.
var ansibleTools struct {
	once sync.Once
	err  error
}

func needAnsible(t *testing.T) {
	ansibleTools.once.Do(func() {
		missing := false
		for _, c := range []string{"ansible-playbook", "ansible-lint", "yamllint", "ssh", "ssh-keygen"} {
			if _, err := exec.LookPath(c); err != nil {
				missing = true
			}
		}
		if !missing {
			return
		}
		install := func() error {
			cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "ansible-core", "ansible-lint", "yamllint", "openssh-client")
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("apt-get install ansible-core ansible-lint yamllint openssh-client: %v\n%s", err, out)
			}
			return nil
		}
		if ansibleTools.err = install(); ansibleTools.err != nil {
			if out, err := exec.Command("apt-get", "update").CombinedOutput(); err != nil {
				ansibleTools.err = fmt.Errorf("apt-get update: %v\n%s", err, out)
				return
			}
			ansibleTools.err = install()
		}
	})
	if ansibleTools.err != nil {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatal(ansibleTools.err)
		}
		t.Skipf("SKIP: %v", ansibleTools.err)
	}
}

// ansibleRelease is the release the role installs: the amd64 archive of
// install/package/release.sh (make release) with its SHA256SUMS beside it,
// and its gnsh unpacked for the test's own comparisons.
type ansibleRelease struct {
	dir     string // release.sh's OUTDIR: the archive and SHA256SUMS
	archive string // gnsh_VERSION_linux_amd64.tar.gz
	bin     string // the archive's gnsh, unpacked on the host
}

func buildAnsibleRelease(t *testing.T) ansibleRelease {
	t.Helper()
	top, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(resultsRoot, "ansible-release")
	_ = os.RemoveAll(dir)
	cmd := exec.Command("sh", "install/package/release.sh", dir)
	cmd.Dir = top
	cmd.Env = append(os.Environ(), "GNSH_RELEASE_ARCHS=amd64", "GNSH_RELEASE_FORMATS=tar")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install/package/release.sh: %v\n%s", err, out)
	}
	archives, _ := filepath.Glob(filepath.Join(dir, "gnsh_*_linux_amd64.tar.gz"))
	if len(archives) != 1 {
		t.Fatalf("release.sh made %v, want one gnsh_*_linux_amd64.tar.gz", archives)
	}
	r := ansibleRelease{dir: dir, archive: archives[0], bin: filepath.Join(dir, "unpacked", "gnsh")}
	if err := os.MkdirAll(filepath.Dir(r.bin), 0o755); err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSuffix(filepath.Base(r.archive), ".tar.gz")
	if out, err := exec.Command("tar", "-xzf", r.archive, "-C", filepath.Dir(r.bin), "--strip-components=1", name+"/gnsh").CombinedOutput(); err != nil {
		t.Fatalf("tar -x %s/gnsh: %v\n%s", name, err, out)
	}
	return r
}

// TestAnsibleE2E applies the role to a Debian 11 and a Debian 12 node at
// the same time (one container each, a persistent root that survives the
// reboot in the middle), installing from a release archive built by
// install/package/release.sh.
func TestAnsibleE2E(t *testing.T) {
	if os.Getenv("GNSH_E2E_ANSIBLE") == "0" {
		t.Skip("SKIP: GNSH_E2E_ANSIBLE=0")
	}
	suites := e2eSuites()
	needAnsible(t)
	rel := buildAnsibleRelease(t)
	var wg sync.WaitGroup
	for _, s := range suites {
		wg.Add(1)
		go func() { defer wg.Done(); rootfsFlavor(s, "ansible") }()
	}
	wg.Wait()
	for _, s := range suites {
		if _, _, err := rootfsFlavor(s, "ansible"); err != nil {
			t.Fatalf("rootfs %s (ansible): %v", s, err)
		}
	}
	ansibleCP.parent = t
	t.Run("lint", func(t *testing.T) { t.Parallel(); lintRole(t) })
	for _, s := range suites {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			runAnsibleSuite(t, s, rel)
		})
	}
}

// lintRole runs ansible-playbook --syntax-check, ansible-lint (production
// profile, offline) and yamllint on install/ansible (configured by its
// .ansible-lint and .yamllint) and on the test's own playbook. Nothing is
// run against any host.
func lintRole(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "install", "ansible"))
	if err != nil {
		t.Fatal(err)
	}
	testDir, err := filepath.Abs("ansible")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	for _, argv := range [][]string{
		{dir, "ansible-playbook", "--syntax-check", "-i", "nonode,", "site.yml"},
		{dir, "ansible-lint", "--offline", "--nocolor", "--profile", "production", "site.yml", "roles/gnsh"},
		{dir, "yamllint", "--strict", "."},
		{testDir, "ansible-lint", "--offline", "--nocolor", "--profile", "production", "reboot.yml"},
		{testDir, "yamllint", "--strict", "-c", filepath.Join(dir, ".yamllint"), "."},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, argv[1], argv[2:]...)
		cmd.Dir, argv = argv[0], argv[1:]
		cmd.Env = append(os.Environ(), "HOME="+home, "ANSIBLE_ROLES_PATH="+filepath.Join(dir, "roles"), "NO_COLOR=1", "ANSIBLE_NOCOLOR=1")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		} else {
			t.Logf("%s: ok", strings.Join(argv, " "))
		}
	}
}

// ansibleNode is one container managed by Ansible.
type ansibleNode struct {
	t     *testing.T // the current step's
	top   *testing.T // the suite's: owns the containers
	suite string
	dir   string          // case dir on the host
	adir  string          // dir/ansible: inventory, ansible.cfg, logs
	gnsh  string          // the binary the role installs (the release's)
	rel   *ansibleRelease // nil: binary mode (TestAnsibleRollingE2E)
	c     *container
	d     *drainCase
	port  int
	runs  int
}

func runAnsibleSuite(t *testing.T, suite string, rel ansibleRelease) {
	start := time.Now()
	rootfs, _, err := rootfsFlavor(suite, "ansible")
	if err != nil {
		t.Fatal(err)
	}
	dir := freshResults(t, "ansible", suite, "ansible")
	defer func() {
		if t.Failed() {
			markFailed()
		}
		t.Logf("%s: the Ansible case took %v", suite, time.Since(start).Round(100*time.Millisecond))
	}()

	d := &drainCase{suite: suite, node: "ansible-" + suite, peer: "ansible-" + suite + "-peer", ns: "ansible-" + suite, shared: ansibleCP}
	d.connect(t)
	d.populate(t)

	n := &ansibleNode{t: t, top: t, suite: suite, dir: dir, adir: filepath.Join(dir, "ansible"), gnsh: rel.bin, rel: &rel, d: d}
	root := persistentRoot(t, rootfs, dir)
	n.c = boot(t, suite, rootfs, dir, bootOpts{persist: root})
	d.installKubeconfig(n.c)
	d.reportBoot(t, n.c)
	n.setupSSH()
	t.Cleanup(func() { n.auditKeep() })

	before := n.listing()
	kubeletVars := map[string]any{"gnsh_config": map[string]any{"drainTimeout": "2m", "events": true}}

	n.step("check_mode_fresh", func(t *testing.T) {
		r := n.play("check-fresh", "site.yml", kubeletVars, true)
		if r.changed == 0 {
			t.Errorf("check mode on a fresh node reports no changes")
		}
		if diff := lineDiff(before, n.listing()); diff != "" {
			t.Errorf("check mode changed the node:\n%s", diff)
		}
		// With an admin kubeconfig (the default gnsh_credentials: auto):
		// the token it would write, for a Node not known before gnsh is
		// installed.
		r = n.play("check-fresh-dedicated", "site.yml", withVars(kubeletVars, map[string]any{
			"gnsh_kubectl": filepath.Join(d.cp.BinDir, "kubectl"), "gnsh_kubectl_kubeconfig": d.cp.AdminKubeconfig}), true)
		if want := "/etc/gnsh/kubeconfig would get a new token of 24h, bound to Node (this node's: not known until gnsh is installed): there is none"; !strings.Contains(r.out, want) {
			t.Errorf("check mode with an admin kubeconfig on a fresh node does not say %q", want)
		}
		if strings.Contains(r.out, "reboot-slot gate is off") {
			t.Errorf("check mode with an admin kubeconfig says that the gate is off")
		}
		if diff := lineDiff(before, n.listing()); diff != "" {
			t.Errorf("check mode changed the node:\n%s", diff)
		}
	})
	// A release archive that is not the one SHA256SUMS names (one byte
	// changed): refused before anything is unpacked, and removed.
	n.step("release_checksum_mismatch", func(t *testing.T) {
		bad := filepath.Join(n.adir, "tampered")
		if err := os.MkdirAll(bad, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(n.rel.archive)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		mustWrite(t, filepath.Join(bad, filepath.Base(n.rel.archive)), string(b))
		sums, err := os.ReadFile(filepath.Join(n.rel.dir, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(bad, "SHA256SUMS"), string(sums))
		r := n.playFails("tampered", "site.yml", withVars(kubeletVars, map[string]any{
			"gnsh_release_src": filepath.Join(bad, filepath.Base(n.rel.archive))}))
		if !strings.Contains(r.out, "removed, nothing installed") {
			t.Errorf("the play does not say that the archive does not match SHA256SUMS")
		}
		if diff := lineDiff(before, n.listing()); diff != "" {
			t.Errorf("a release that does not match SHA256SUMS changed the node:\n%s", diff)
		}
		if left := n.c.must("find", "/var/cache/gnsh-ansible", "-mindepth", "1").stdout; left != "" {
			t.Errorf("left in /var/cache/gnsh-ansible:\n%s", left)
		}
	})
	n.step("apply_kubelet_credentials", func(t *testing.T) {
		r := n.play("apply", "site.yml", kubeletVars, false)
		if r.changed == 0 {
			t.Errorf("the first run changed nothing")
		}
		n.expectInstalled("drainTimeout: \"2m\"\nevents: true\n")
		if _, err := os.Stat(filepath.Join(root, "etc/gnsh/kubeconfig")); err == nil {
			t.Errorf("/etc/gnsh/kubeconfig exists with the default gnsh_credentials (auto) and no gnsh_kubectl_kubeconfig")
		}
		// The default (auto) without an admin kubeconfig: the kubelet's
		// credentials only, and the play says, once, that the gate is off
		// and what turns it on.
		if n := strings.Count(r.out, `"gnsh: the reboot-slot gate is off on 1 of 1 nodes (`+suite+`): with the kubelet's credentials only, each reboot is drained`); n != 1 {
			t.Errorf("the play says %d times that the reboot-slot gate is off with the kubelet's credentials, want once", n)
		}
		if !strings.Contains(r.out, "to turn it on, set gnsh_kubectl_kubeconfig (an admin kubeconfig on the controller") ||
			strings.Contains(r.out, "and gnsh_credentials: auto") {
			t.Errorf("the gate-off line does not name gnsh_kubectl_kubeconfig alone as what turns the gate on")
		}
	})
	n.step("second_run_changes_nothing", func(t *testing.T) {
		n.expectUnchanged(n.play("apply-again", "site.yml", kubeletVars, false))
	})
	// A typo below the top level of gnsh_config: gnsh config check refuses
	// the file at install time, naming the key's path, and the node keeps
	// its config.
	n.step("config_typo_refused", func(t *testing.T) {
		conf := n.c.must("cat", "/etc/gnsh/config.yaml").stdout
		r := n.playFails("typo", "site.yml", map[string]any{"gnsh_config": map[string]any{"slots": map[string]any{"maxUnavalable": 2}}})
		if !strings.Contains(r.out, "slots.maxUnavalable") {
			t.Errorf("the failed play does not name slots.maxUnavalable")
		}
		if got := n.c.must("cat", "/etc/gnsh/config.yaml").stdout; got != conf {
			t.Errorf("/etc/gnsh/config.yaml changed by a refused config:\n%s\nwas:\n%s", got, conf)
		}
		n.expectUnchanged(n.play("after-typo", "site.yml", kubeletVars, false))
	})
	n.step("switch_resolves_to_gnsh", func(t *testing.T) {
		n.expectSwitched()
	})
	n.step("reboot_drains_through_gnsh", func(t *testing.T) {
		n.rebootInside()
	})

	// The default gnsh_credentials (auto) with an admin kubeconfig: the
	// dedicated identity.
	dedicated := map[string]any{
		"gnsh_kubectl":            filepath.Join(d.cp.BinDir, "kubectl"),
		"gnsh_kubectl_kubeconfig": d.cp.AdminKubeconfig,
		// A token carries no node name, and the container's host name is
		// not the Node's.
		// The two suites share the control plane and its reboot slots:
		// room for both (TestAnsibleRollingE2E has a limit of one).
		"gnsh_config": map[string]any{"node": d.node, "drainTimeout": "2m", "slots": map[string]any{"maxUnavailable": 5, "settle": "5s"}},
	}
	n.step("dedicated_identity", func(t *testing.T) {
		// The first run writes /etc/gnsh/kubeconfig: watched from the host
		// (the container's root is the overlay mounted at root) for its mode
		// at every change, and run with -vvv, whose output must hold
		// neither the admin's key nor the token.
		kc := filepath.Join(root, "etc", "gnsh", "kubeconfig")
		if _, err := os.Lstat(kc); err == nil {
			t.Fatalf("/etc/gnsh/kubeconfig exists before the first run with gnsh_credentials=dedicated")
		}
		w := watchModes(t, filepath.Dir(kc), "kubeconfig")
		r := n.playWith("dedicated", "site.yml", dedicated, false, "-vvv")
		w.expectPrivate(t, "kubeconfig")
		n.expectNoSecrets(r.out)
		if strings.Contains(r.out, "reboot-slot gate is off") {
			t.Errorf("the play says that the reboot-slot gate is off with gnsh_credentials=dedicated")
		}
		if r.changed == 0 {
			t.Errorf("switching to the dedicated identity changed nothing")
		}
		n.expectInstalled(fmt.Sprintf("node: %q\ndrainTimeout: \"2m\"\nslots: {\"maxUnavailable\": 5, \"settle\": \"5s\"}\n", d.node))
		n.expectDedicatedKubeconfig()
		n.expectFreshToken()
		n.expectUnchanged(n.play("dedicated-again", "site.yml", dedicated, false))
		n.expectUnchanged(n.play("dedicated-check", "site.yml", dedicated, true))
	})
	// A /etc/gnsh/kubeconfig that is not a kubeconfig refuses every
	// shutdown (the reboot-slot gate's, beside the kubelet's kubeconfig the
	// drain uses), and gnsh config check says so; the next run replaces it
	// (it failed reading it).
	n.step("dedicated_kubeconfig_repaired", func(t *testing.T) {
		n.c.must("sh", "-ec", `printf 'not: [a kubeconfig\n' > /etc/gnsh/kubeconfig`)
		if r := n.c.run(30*time.Second, "/usr/local/sbin/gnsh", "config", "check"); r.rc != 1 ||
			!strings.Contains(r.stderr, "kubeconfig: gnsh's own kubeconfig is the reboot-slot gate's, and /etc/gnsh/kubeconfig is not a usable kubeconfig") {
			t.Errorf("gnsh config check with a broken /etc/gnsh/kubeconfig: %s", r)
		}
		if r := n.play("dedicated-repair", "site.yml", dedicated, false); r.changed == 0 {
			t.Errorf("the run that replaces a broken /etc/gnsh/kubeconfig changed nothing")
		}
		n.expectDedicatedKubeconfig()
		n.c.must("/usr/local/sbin/gnsh", "config", "check")
		n.expectUnchanged(n.play("dedicated-repaired-again", "site.yml", dedicated, false))
		// A link to nothing there is replaced too (the link could not be
		// written over).
		n.c.must("ln", "-sfn", "/nonexistent/kubeconfig", "/etc/gnsh/kubeconfig")
		if r := n.play("dedicated-relink", "site.yml", dedicated, false); r.changed == 0 {
			t.Errorf("the run that replaces a link to nothing at /etc/gnsh/kubeconfig changed nothing")
		}
		n.expectDedicatedKubeconfig()
	})
	n.step("dedicated_token_lifecycle", func(t *testing.T) { n.tokenLifecycle(dedicated) })
	n.step("ansible_reboot_module", func(t *testing.T) { n.ansibleReboot(dedicated) })

	// gnsh_agent: false: the agent disabled and stopped, and kept so: a
	// second run (and a check-mode run) changes nothing, which needs gnsh
	// install not to enable it again.
	n.step("agent_disabled_kept", func(t *testing.T) {
		off := withVars(dedicated, map[string]any{"gnsh_agent": false})
		if r := n.play("agent-off", "site.yml", off, false); r.changed == 0 {
			t.Errorf("gnsh_agent=false changed nothing")
		}
		n.expectAgent("disabled", "inactive")
		n.expectUnchanged(n.play("agent-off-again", "site.yml", off, false))
		n.expectAgent("disabled", "inactive")
		n.expectUnchanged(n.play("agent-off-check", "site.yml", off, true))
	})
	// An admin's mask stays, with the default gnsh_agent: true. Where the
	// role's unit is (/etc/systemd/system) systemctl mask refuses ("already
	// exists"), so the mask is what it would make there: a link to /dev/null.
	n.step("agent_masked_kept", func(t *testing.T) {
		n.c.must("sh", "-ec", "ln -sf /dev/null /etc/systemd/system/gnsh.service; systemctl daemon-reload")
		n.expectAgent("masked", "inactive")
		n.expectMaskKept(n.play("agent-masked", "site.yml", dedicated, false))
	})

	// gnsh_switch: false, unlike the runs before: absent undoes gnsh
	// install's switch whenever its record is on the node.
	n.step("state_absent", func(t *testing.T) {
		absent := withVars(dedicated, map[string]any{"gnsh_state": "absent", "gnsh_switch": false})
		r := n.play("absent", "site.yml", absent, false)
		if r.changed == 0 {
			t.Errorf("state=absent changed nothing")
		}
		r2 := n.c.in(10*time.Second, "sh", "-ec", `for c in shutdown poweroff reboot halt; do
			p=$(readlink -f /sbin/$c); [ -f "$p" ] || { echo "/sbin/$c -> $p: no such file"; exit 1; }
			case $p in *gnsh*) echo "/sbin/$c -> $p"; exit 1;; esac; done
			[ ! -e /var/lib/gnsh/install.json ] || { echo "/var/lib/gnsh/install.json is left"; exit 1; }`)
		if r2.rc != 0 {
			t.Errorf("after state=absent with gnsh_switch=false the commands are not systemd's: %s", r2.stdout)
		}
		if diff := lineDiff(before, n.listing()); diff != "" {
			t.Errorf("the node after state=absent differs from before the role:\n%s", diff)
		}
		n.expectUnchanged(n.play("absent-again", "site.yml", absent, false))
	})

	// Package mode with a stand-in .deb (binary at /usr/sbin/gnsh, unit in
	// /lib/systemd/system, no maintainer scripts: the real package's
	// postinst does the switch, which is not the role's job here), on one
	// suite only, to keep the wall time down.
	if suite != "bullseye" {
		return
	}
	n.step("package_mode", func(t *testing.T) {
		pkg := map[string]any{"gnsh_install_from": "package", "gnsh_package_src": n.stubDeb(), "gnsh_binary_src": ""}
		r := n.play("package", "site.yml", pkg, false)
		if r.changed == 0 {
			t.Errorf("installing the package changed nothing")
		}
		st := n.c.must("sh", "-ec", `dpkg-query -W -f '${Status}\n' gnsh; test ! -e /usr/local/sbin/gnsh && echo no-local-binary
			systemctl is-enabled gnsh.service; systemctl is-active gnsh.service; systemctl show -p ExecMainPID --value gnsh.service | xargs -I{} readlink /proc/{}/exe`).stdout
		if want := "install ok installed\nno-local-binary\nenabled\nactive\n/usr/sbin/gnsh\n"; st != want {
			t.Errorf("package mode: dpkg status, no /usr/local/sbin/gnsh, unit enabled, agent active and its binary: %q, want %q", st, want)
		}
		n.expectUnchanged(n.play("package-again", "site.yml", pkg, false))
		// The package's unit is in /lib/systemd/system: systemctl masks it.
		n.c.must("systemctl", "mask", "--now", "gnsh.service")
		n.expectMaskKept(n.play("package-masked", "site.yml", pkg, false))
		pkg["gnsh_state"] = "absent"
		if r := n.play("package-absent", "site.yml", pkg, false); r.changed == 0 {
			t.Errorf("state=absent in package mode changed nothing")
		}
		if diff := lineDiff(before, n.listing()); diff != "" {
			t.Errorf("the node after state=absent (package) differs from before the role:\n%s", diff)
		}
	})
}

// stubDeb builds a stand-in for `make package`'s .deb: gnsh at
// /usr/sbin/gnsh, the unit (ExecStart=/usr/sbin/gnsh agent) in
// /lib/systemd/system, no maintainer scripts.
func (n *ansibleNode) stubDeb() string {
	t := n.t
	root := filepath.Join(n.adir, "stub-deb")
	for _, d := range []string{"DEBIAN", "usr/sbin", "lib/systemd/system"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(root, "DEBIAN", "control"), "Package: gnsh\nVersion: 0.0.0~e2e\nArchitecture: amd64\n"+
		"Maintainer: gnsh e2e <e2e@invalid>\nDescription: gnsh stand-in package for TestAnsibleE2E\n")
	if err := copyFile(n.gnsh, filepath.Join(root, "usr", "sbin", "gnsh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "usr", "sbin", "gnsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "install", "systemd", "gnsh.service"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, "lib", "systemd", "system", "gnsh.service"),
		strings.ReplaceAll(string(unit), "ExecStart=/usr/local/sbin/gnsh agent", "ExecStart=/usr/sbin/gnsh agent"))
	deb := filepath.Join(n.adir, "gnsh_0.0.0~e2e_amd64.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-Znone", "--build", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	return deb
}

// step runs one part of the suite as a subtest; a failed part stops the rest.
func (n *ansibleNode) step(name string, f func(t *testing.T)) {
	if n.t.Failed() {
		return
	}
	outer := n.t
	ok := outer.Run(name, func(t *testing.T) {
		n.t, n.c.t = t, t
		defer func() { n.t, n.c.t = outer, outer }()
		f(t)
	})
	if !ok {
		outer.FailNow()
	}
}

// ---------------------------------------------------------------- ssh into the container

// setupSSH gives the container's sshd a loopback port of its own (the
// containers share the host's network), a throwaway key for root, and
// starts it (enabled: it comes back after a reboot); then writes the
// inventory and ansible.cfg and checks that the port is the container's.
func (n *ansibleNode) setupSSH() {
	t, c := n.t, n.c
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	key := filepath.Join(n.adir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gnsh-e2e", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(n.dir, "rig", "ssh")
	if err := os.MkdirAll(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(stage, "authorized_keys"), string(pub))
	mustWrite(t, filepath.Join(stage, "gnsh-e2e.conf"), fmt.Sprintf(
		"# gnsh e2e: this container's own port on the shared loopback\nListenAddress 127.0.0.1:%d\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n", n.port))
	c.must("sh", "-ec", `grep -q '^Include /etc/ssh/sshd_config.d/\*.conf' /etc/ssh/sshd_config
		install -d -m 0700 /root/.ssh
		install -m 0600 /rig/ssh/authorized_keys /root/.ssh/authorized_keys
		install -m 0644 /rig/ssh/gnsh-e2e.conf /etc/ssh/sshd_config.d/gnsh-e2e.conf
		rm -rf /rig/ssh
		systemctl enable --quiet --now ssh.service`)
	hostKey := c.must("cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
	f := strings.Fields(hostKey)
	if len(f) < 2 {
		t.Fatalf("container host key: %q", hostKey)
	}
	mustWrite(t, filepath.Join(n.adir, "known_hosts"), fmt.Sprintf("[127.0.0.1]:%d %s %s\n", n.port, f[0], f[1]))
	mustWrite(t, filepath.Join(n.adir, "inventory.ini"), fmt.Sprintf(`[kubernetes_nodes]
%s ansible_host=127.0.0.1 ansible_port=%d ansible_user=root ansible_python_interpreter=/usr/bin/python3 ansible_ssh_private_key_file=%s
`, n.suite, n.port, key))
	roles, err := filepath.Abs(filepath.Join("..", "..", "install", "ansible", "roles"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(n.adir, "ansible.cfg"), fmt.Sprintf(`[defaults]
roles_path = %s
local_tmp = %s
retry_files_enabled = false
host_key_checking = true
timeout = 10
forks = 1
[ssh_connection]
pipelining = true
ssh_args = -o ControlMaster=auto -o ControlPersist=10s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o BatchMode=yes
control_path_dir = %s
`, roles, filepath.Join(n.adir, "tmp"), filepath.Join(n.adir, "known_hosts"), filepath.Join(n.adir, "cp")))
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			st := c.in(10*time.Second, "systemctl", "status", "--no-pager", "-l", "ssh.service")
			t.Fatalf("sshd not listening on 127.0.0.1:%d after 15 s: %v\n%s", n.port, err, st.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.assertContainerSSH()
}

// assertContainerSSH makes sure that 127.0.0.1:PORT is this container's
// sshd and not anything on the host: the listening socket belongs only to
// processes in the container's PID namespace, and ssh (host key pinned to
// the container's) reads the container's boot ID, not the host's.
func (n *ansibleNode) assertContainerSSH() {
	t, c := n.t, n.c
	owners := socketOwners(t, n.port)
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.pid1))
	self, _ := os.Readlink("/proc/self/ns/pid")
	if err != nil || theirs == self {
		t.Fatalf("container PID namespace %q (ours %q): %v", theirs, self, err)
	}
	if len(owners) == 0 {
		t.Fatalf("SAFETY: no process owns a listening socket on 127.0.0.1:%d", n.port)
	}
	for pid, ns := range owners {
		if ns != theirs {
			t.Fatalf("SAFETY: 127.0.0.1:%d is held by PID %d in PID namespace %s, not the container's %s: refusing to run Ansible", n.port, pid, ns, theirs)
		}
	}
	want := strings.TrimSpace(c.must("cat", "/proc/sys/kernel/random/boot_id").stdout)
	out, err := n.ssh(10*time.Second, "cat", "/proc/sys/kernel/random/boot_id")
	if err != nil || strings.TrimSpace(out) != want || want == hostBootID() {
		t.Fatalf("SAFETY: ssh to 127.0.0.1:%d read boot ID %q (%v); the container's is %s, the host's %s", n.port, strings.TrimSpace(out), err, want, hostBootID())
	}
}

// socketOwners maps the PIDs holding a TCP socket listening on
// 127.0.0.1:port (from /proc/net/tcp of our network namespace, which the
// containers share) to their PID namespaces.
func socketOwners(t *testing.T, port int) map[int]string {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	inodes := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) > 9 && f[1] == local && f[3] == "0A" { // LISTEN
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	owners := map[int]string{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); inodes[l] {
				ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
				owners[pid] = ns
			}
		}
	}
	return owners
}

// ssh runs a command in the container over ssh, as Ansible connects.
func (n *ansibleNode) ssh(timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"-p", strconv.Itoa(n.port), "-i", filepath.Join(n.adir, "id_ed25519"), "-o", "IdentitiesOnly=yes",
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + filepath.Join(n.adir, "known_hosts"),
		"-o", "ConnectTimeout=5", "root@127.0.0.1", "--"}
	out, err := exec.CommandContext(ctx, "ssh", append(args, argv...)...).Output()
	return string(out), err
}

// ---------------------------------------------------------------- ansible-playbook

type recap struct {
	ok, changed, unreachable, failed, skipped int
	rc                                        int
	out                                       string
}

var recapRE = regexp.MustCompile(`(?m)^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)`)

// playCmd returns ansible-playbook for playbook with vars (and --check),
// its output (verbosity: -v, -vvv) going to adir/NN-name.log. It checks
// first that the inventory's port is the container's sshd.
func (n *ansibleNode) playCmd(ctx context.Context, name, playbook string, vars map[string]any, check bool, verbosity string) (*exec.Cmd, *os.File) {
	t := n.t
	n.assertContainerSSH()
	n.runs++
	varsFile := filepath.Join(n.adir, fmt.Sprintf("%02d-%s.vars.json", n.runs, name))
	vars = withDefaultVars(vars, n)
	b, _ := json.MarshalIndent(vars, "", "  ")
	mustWrite(t, varsFile, string(b))
	pb := playbook
	if !filepath.IsAbs(pb) {
		pb, _ = filepath.Abs(filepath.Join("..", "..", "install", "ansible", playbook))
	}
	args := []string{"-i", filepath.Join(n.adir, "inventory.ini"), "-e", "@" + varsFile, verbosity, pb}
	if check {
		args = append(args, "--check", "--diff")
	}
	cmd := exec.CommandContext(ctx, "ansible-playbook", args...)
	cmd.Dir = n.adir
	home := filepath.Join(n.adir, "home")
	_ = os.MkdirAll(home, 0o700)
	cmd.Env = append(os.Environ(), "ANSIBLE_CONFIG="+filepath.Join(n.adir, "ansible.cfg"), "ANSIBLE_NOCOLOR=1",
		"ANSIBLE_FORCE_COLOR=0", "HOME="+home, "ANSIBLE_HOME="+filepath.Join(home, ".ansible"))
	logf, err := os.Create(filepath.Join(n.adir, fmt.Sprintf("%02d-%s.log", n.runs, name)))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "# ansible-playbook %s\n", strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	n.c.logf("ansible-playbook %s (%s)", name, strings.Join(args, " "))
	return cmd, logf
}

// withVars returns a copy of vars with extra set.
func withVars(vars, extra map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range vars {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func withDefaultVars(vars map[string]any, n *ansibleNode) map[string]any {
	out := map[string]any{"gnsh_install_from": "binary", "gnsh_binary_src": n.gnsh, "gnsh_hosts": "kubernetes_nodes"}
	if n.rel != nil {
		// The release archive on the controller, its SHA256SUMS beside it.
		out = map[string]any{"gnsh_install_from": "release", "gnsh_release_src": n.rel.archive, "gnsh_hosts": "kubernetes_nodes"}
	}
	for k, v := range vars {
		out[k] = v
	}
	return out
}

// play runs a playbook to its end (with -v) and returns its recap; a
// failed play fails the test.
func (n *ansibleNode) play(name, playbook string, vars map[string]any, check bool) recap {
	return n.playWith(name, playbook, vars, check, "-v")
}

// playWith is play with another verbosity (-vvv).
func (n *ansibleNode) playWith(name, playbook string, vars map[string]any, check bool, verbosity string) recap {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd, logf := n.playCmd(ctx, name, playbook, vars, check, verbosity)
	err := cmd.Run()
	logf.Close()
	return n.recap(name, logf.Name(), err, start)
}

// playFails runs a playbook that must fail on the node (failed=1, rc 2)
// and returns its recap.
func (n *ansibleNode) playFails(name, playbook string, vars map[string]any) recap {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd, logf := n.playCmd(ctx, name, playbook, vars, false, "-v")
	err := cmd.Run()
	logf.Close()
	b, _ := os.ReadFile(logf.Name())
	r := recap{out: string(b), rc: 0}
	if ee, ok := err.(*exec.ExitError); ok {
		r.rc = ee.ExitCode()
	} else if err != nil {
		r.rc = -1
	}
	for _, h := range recapRE.FindAllStringSubmatch(r.out, -1) {
		r.failed, _ = strconv.Atoi(h[5])
		r.unreachable, _ = strconv.Atoi(h[4])
	}
	n.c.logf("ansible-playbook %s (meant to fail): rc %d, failed=%d in %.1f s (%s)", name, r.rc, r.failed, time.Since(start).Seconds(), logf.Name())
	if r.rc != 2 || r.failed != 1 || r.unreachable != 0 {
		tail := r.out
		if len(tail) > 6000 {
			tail = tail[len(tail)-6000:]
		}
		n.t.Fatalf("ansible-playbook %s: rc %d, failed=%d unreachable=%d; want a failed task (rc 2, failed=1):\n%s", name, r.rc, r.failed, r.unreachable, tail)
	}
	return r
}

func (n *ansibleNode) recap(name, log string, err error, start time.Time) recap {
	t := n.t
	b, _ := os.ReadFile(log)
	r := recap{out: string(b)}
	if err != nil {
		r.rc = -1
		if ee, ok := err.(*exec.ExitError); ok {
			r.rc = ee.ExitCode()
		}
	}
	m := recapRE.FindAllStringSubmatch(r.out, -1)
	for _, h := range m {
		if h[1] != n.suite {
			t.Errorf("ansible-playbook %s: a recap for host %q; the inventory has only %q", name, h[1], n.suite)
			continue
		}
		r.ok, _ = strconv.Atoi(h[2])
		r.changed, _ = strconv.Atoi(h[3])
		r.unreachable, _ = strconv.Atoi(h[4])
		r.failed, _ = strconv.Atoi(h[5])
		r.skipped, _ = strconv.Atoi(h[6])
	}
	n.c.logf("ansible-playbook %s: rc %d, ok=%d changed=%d unreachable=%d failed=%d skipped=%d in %.1f s (%s)",
		name, r.rc, r.ok, r.changed, r.unreachable, r.failed, r.skipped, time.Since(start).Seconds(), log)
	if r.rc != 0 || len(m) == 0 || r.failed != 0 || r.unreachable != 0 {
		tail := r.out
		if len(tail) > 6000 {
			tail = tail[len(tail)-6000:]
		}
		t.Fatalf("ansible-playbook %s: rc %d, recap ok=%d changed=%d unreachable=%d failed=%d:\n%s", name, r.rc, r.ok, r.changed, r.unreachable, r.failed, tail)
	}
	return r
}

// expectUnchanged fails unless the recap says changed=0, naming the tasks that changed.
func (n *ansibleNode) expectUnchanged(r recap) {
	if r.changed == 0 {
		return
	}
	var tasks []string
	task := ""
	for _, l := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(l, "TASK [") || strings.HasPrefix(l, "RUNNING HANDLER [") {
			task = l
		} else if strings.HasPrefix(l, "changed:") {
			tasks = append(tasks, task)
		}
	}
	n.t.Errorf("a repeated run reports changed=%d; want 0. Changed:\n%s", r.changed, strings.Join(tasks, "\n"))
}

// ---------------------------------------------------------------- checks on the node

// expectInstalled checks the binary, the config (exactly the keys set),
// the unit and the running agent.
func (n *ansibleNode) expectInstalled(configKeys string) {
	t, c := n.t, n.c
	want, err := exec.Command("sha256sum", n.gnsh).Output()
	if err != nil {
		t.Fatal(err)
	}
	r := c.must("sh", "-ec", `stat -c '%a %U %G' /usr/local/sbin/gnsh; sha256sum /usr/local/sbin/gnsh | cut -d' ' -f1
		stat -c '%a %U %G' /etc/gnsh/config.yaml /etc/systemd/system/gnsh.service
		systemctl is-enabled gnsh.service; systemctl is-active gnsh.service`)
	got := strings.Fields(r.stdout)
	wantFields := []string{"755", "root", "root", strings.Fields(string(want))[0], "644", "root", "root", "644", "root", "root", "enabled", "active"}
	if strings.Join(got, " ") != strings.Join(wantFields, " ") {
		t.Errorf("binary, config, unit, agent: got %q, want %q", got, wantFields)
	}
	conf := c.must("cat", "/etc/gnsh/config.yaml").stdout
	var keys []string
	for _, l := range strings.Split(conf, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			keys = append(keys, l)
		}
	}
	if got := strings.Join(keys, "\n") + "\n"; got != configKeys {
		t.Errorf("/etc/gnsh/config.yaml keys:\n%s\nwant:\n%s", got, configKeys)
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "install", "systemd", "gnsh.service"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.must("cat", "/etc/systemd/system/gnsh.service").stdout; got != string(unit) {
		t.Errorf("/etc/systemd/system/gnsh.service differs from install/systemd/gnsh.service")
	}
	if n.rel == nil {
		return
	}
	// From a release: its example config beside the role's, the man pages
	// (written by gnsh install), the archive and its tree staged root's only.
	example, err := os.ReadFile(filepath.Join("..", "..", "install", "gnsh", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.must("cat", "/etc/gnsh/config.yaml.example").stdout; got != string(example) {
		t.Errorf("/etc/gnsh/config.yaml.example differs from install/gnsh/config.yaml")
	}
	name := strings.TrimSuffix(filepath.Base(n.rel.archive), ".tar.gz")
	st := c.must("sh", "-ec", `stat -c '%a %U' /var/cache/gnsh-ansible; ls /var/cache/gnsh-ansible
		ls /usr/local/share/man/man5/gnsh-config.5 /usr/local/share/man/man8/gnsh-shutdown.8 /usr/local/share/man/man8/gnsh.8`).stdout
	if want := "700 root\n" + name + "\n" + name + ".tar.gz\n/usr/local/share/man/man5/gnsh-config.5\n/usr/local/share/man/man8/gnsh-shutdown.8\n/usr/local/share/man/man8/gnsh.8\n"; st != want {
		t.Errorf("staged release and man pages: %q, want %q", st, want)
	}
}

// expectDedicatedKubeconfig checks /etc/gnsh/kubeconfig: root's, 0600, the
// ServiceAccount's identity at the API server, and a dry-run drain with it
// inside the node.
func (n *ansibleNode) expectDedicatedKubeconfig() {
	t, c := n.t, n.c
	if st := strings.TrimSpace(c.must("stat", "-c", "%a %U %G", "/etc/gnsh/kubeconfig").stdout); st != "600 root root" {
		t.Errorf("/etc/gnsh/kubeconfig: %s, want 600 root root", st)
	}
	kc := filepath.Join(n.adir, "node-kubeconfig")
	if err := os.WriteFile(kc, []byte(c.must("cat", "/etc/gnsh/kubeconfig").stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(n.d.cp.BinDir, "kubectl"), "--kubeconfig", kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput()
	if err != nil || string(out) != saUser {
		t.Errorf("kubectl auth whoami with the node's /etc/gnsh/kubeconfig: %q (%v), want %s", out, err, saUser)
	}
	r := c.run(60*time.Second, "/usr/local/sbin/gnsh", "drain", "--dry-run")
	if r.rc != 0 {
		t.Errorf("gnsh drain --dry-run with the dedicated identity: %s", r)
	}
}

// expectAgent checks gnsh.service's unit file state (systemctl
// is-enabled) and whether it runs (is-active).
func (n *ansibleNode) expectAgent(enabled, active string) {
	got := n.c.must("sh", "-c", "systemctl is-enabled gnsh.service; systemctl is-active gnsh.service; true").stdout
	if want := enabled + "\n" + active + "\n"; got != want {
		n.t.Errorf("gnsh.service is-enabled, is-active: %q, want %q", got, want)
	}
}

// expectMaskKept checks a run over an admin's mask of the agent: nothing
// changed, the role said why, and the unit is still masked and stopped.
func (n *ansibleNode) expectMaskKept(r recap) {
	n.expectUnchanged(r)
	if !strings.Contains(r.out, "gnsh.service is masked") {
		n.t.Errorf("the play does not say that it left the masked gnsh.service alone")
	}
	n.expectAgent("masked", "inactive")
}

// expectNoSecrets fails if out, a play's output, holds the admin's client
// key (of the kubeconfig the role's kubectl tasks use) or the token in the
// node's /etc/gnsh/kubeconfig.
func (n *ansibleNode) expectNoSecrets(out string) {
	t := n.t
	secrets := map[string]string{}
	admin, err := os.ReadFile(n.d.cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(admin), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "client-key-data: "); ok {
			secrets["the admin's client-key-data"] = v
			if pem, err := base64.StdEncoding.DecodeString(v); err == nil {
				if lines := strings.Split(string(pem), "\n"); len(lines) > 1 {
					secrets["a line of the admin's client key (PEM)"] = lines[1]
				}
			}
		}
	}
	m := regexp.MustCompile(`(?m)^\s*token: "?([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.([A-Za-z0-9_-]+))"?$`).FindStringSubmatch(n.c.must("cat", "/etc/gnsh/kubeconfig").stdout)
	if m != nil {
		secrets["the node's token"], secrets["the token's signature"] = m[1], m[2]
	}
	if len(secrets) != 4 {
		t.Fatalf("found %d of the 4 secrets to look for (the admin's client key in %s, the token in /etc/gnsh/kubeconfig)", len(secrets), n.d.cp.AdminKubeconfig)
	}
	for what, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the play's output (-vvv) shows %s", what)
		}
	}
}

// modeWatch follows, with inotify, the files of one directory whose name
// holds a string, and records the mode of each at every event on it
// (created, linked, moved in, written, attributes changed).
type modeWatch struct {
	f    *os.File
	dir  string
	done chan struct{}
	seen []string // "NAME MODE" at each event
	wide []string // those with a mode wider than 0600
}

// watchModes watches dir (on the host) for files whose name holds substr.
func watchModes(t *testing.T, dir, substr string) *modeWatch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ATTRIB|unix.IN_MODIFY|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		t.Fatalf("inotify on %s: %v", dir, err)
	}
	w := &modeWatch{f: os.NewFile(uintptr(fd), "inotify"), dir: dir, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		buf := make([]byte, 64<<10)
		for {
			n, err := w.f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				l := int(binary.NativeEndian.Uint32(buf[off+12:]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+l]), "\x00")
				off += unix.SizeofInotifyEvent + l
				if strings.Contains(name, substr) {
					w.check(name)
				}
			}
		}
	}()
	return w
}

func (w *modeWatch) check(name string) {
	fi, err := os.Lstat(filepath.Join(w.dir, name))
	if err != nil {
		return
	}
	w.seen = append(w.seen, fmt.Sprintf("%s %v", name, fi.Mode()))
	if fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		w.wide = append(w.wide, fmt.Sprintf("%s %v", name, fi.Mode()))
	}
}

// expectPrivate stops the watch and fails if a file was seen with a mode
// wider than 0600, or if none named name was seen at all.
func (w *modeWatch) expectPrivate(t *testing.T, name string) {
	t.Helper()
	w.f.Close()
	<-w.done
	t.Logf("modes seen in %s: %s", w.dir, strings.Join(w.seen, ", "))
	if len(w.wide) > 0 {
		t.Errorf("readable by others for a moment: %s", strings.Join(w.wide, ", "))
	}
	for _, s := range w.seen {
		if strings.HasPrefix(s, name+" ") {
			return
		}
	}
	t.Errorf("no event on %s/%s: the watch saw nothing of it", w.dir, name)
}

// expectSwitched checks that shutdown/poweroff/reboot/halt are gnsh for
// root's PATH and for sudo's secure_path.
func (n *ansibleNode) expectSwitched() {
	t, c := n.t, n.c
	for _, cmd := range []string{"shutdown", "poweroff", "reboot", "halt"} {
		for _, via := range [][]string{{"sh", "-c"}, {"sudo", "-n", "sh", "-c"}} {
			r := c.in(10*time.Second, append(via, `p=$(command -v `+cmd+`) && [ "$p" -ef /usr/local/sbin/gnsh ] && echo "$p"`)...)
			if r.rc != 0 {
				t.Errorf("%s for %s is not gnsh: %s", cmd, strings.Join(via, " "), r)
			}
		}
	}
}

// listing is what state=absent must restore: every path under /etc, /usr
// and dpkg's diversion and alternatives records with type, mode, owner,
// size and link target (no size for directories: a directory copied up
// into the overlay's upper layer has another), and the contents of /etc, /usr/local and the
// command directories (python's byte-code caches left out).
func (n *ansibleNode) listing() string {
	r := n.c.must("sh", "-ec", `find /etc /usr /var/lib/dpkg/alternatives -xdev -name __pycache__ -prune -o -type d -printf '%p %y %m %u:%g\n' -o -printf '%p %y %m %u:%g %s %l\n' | LC_ALL=C sort
		for f in /var/lib/dpkg/diversions; do [ -e $f ] && sha256sum $f; done
		find /etc /usr/local /usr/sbin /usr/bin -xdev -name __pycache__ -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum`)
	return r.stdout
}

// ---------------------------------------------------------------- reboots

// rebootInside: `reboot` inside the node, which the role's switch made
// gnsh: the Node is drained, the container goes down through logind (133)
// and is booted again, where the role's agent lifts gnsh's cordon.
func (n *ansibleNode) rebootInside() {
	t := n.t
	trigger := time.Now()
	// As an admin types it with sudo: sudo's secure_path must find gnsh.
	r := n.c.run(90*time.Second, "sudo", "reboot")
	if r.rc != 0 {
		t.Errorf("sudo reboot: %s", r)
	}
	n.afterReboot(trigger, "system:node:"+n.d.node)
	n.repopulate()
}

// ansibleReboot: a play with ansible.builtin.reboot against the node. The
// module runs the first `shutdown` it finds in /sbin, /bin, /usr/sbin,
// /usr/bin, /usr/local/sbin (shutdown -r 0 "Reboot initiated by Ansible"),
// which must be gnsh: put there by the role's `gnsh install`. The test
// boots the container again when it went down, as a machine would, and the
// play goes on once the boot ID changed.
func (n *ansibleNode) ansibleReboot(vars map[string]any) {
	t, c := n.t, n.c
	c.must("sh", "-ec", `[ /sbin/shutdown -ef /usr/local/sbin/gnsh ]`)
	pb, err := filepath.Abs(filepath.Join("ansible", "reboot.yml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	cmd, logf := n.playCmd(ctx, "reboot-module", pb, vars, false, "-v")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	finish := func() recap {
		var err error
		select {
		case err = <-done:
		case <-time.After(3 * time.Minute):
			cancel()
			err = <-done
		}
		logf.Close()
		return n.recap("reboot-module", logf.Name(), err, start)
	}
	// The play's shutdown: the container goes down by itself.
	select {
	case <-c.exited:
	case err := <-done:
		logf.Close()
		t.Fatalf("the play ended (%v) before the container went down:\n%s", err, tailFile(logf.Name(), 4000))
	case <-time.After(2 * time.Minute):
		c.kill()
		cancel()
		<-done
		t.Fatalf("the container did not go down within 2 min of the play's start:\n%s", tailFile(logf.Name(), 4000))
	}
	// Drained with the kubelet's identity even with the dedicated one
	// on the node: that one is the reboot-slot gate's only (issue 22).
	n.afterReboot(start, "system:node:"+n.d.node)
	r := finish()
	if !strings.Contains(r.out, "boot ID changed") {
		t.Errorf("the reboot play did not report a new boot ID")
	}
}

// afterReboot waits for the container to go down with 133 after a reboot
// triggered at trigger, checks the drain in the audit log (cordon and
// evictions by user, before the exit), boots it again and waits until the
// role's agent has lifted gnsh's cordon.
func (n *ansibleNode) afterReboot(trigger time.Time, user string) {
	t, c := n.t, n.c
	if !c.waitExit(90*time.Second - time.Since(trigger)) {
		t.Fatalf("container did not go down within 90 s")
	}
	if c.exitCode != 133 {
		t.Fatalf("nspawn exit code %d, want 133 (reboot)", c.exitCode)
	}
	c.logf("container down %.1f s after the trigger (rc 133)", c.exitAt.Sub(trigger).Seconds())
	evs, err := readAudit(n.d.cp.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	cordoned, evicted := false, map[string]bool{}
	for _, e := range evs {
		at, o := e.StageTimestamp.Time, e.ObjectRef
		if at.Before(trigger) || at.After(c.exitAt) || e.User.Username != user {
			continue
		}
		if o.Resource == "nodes" && o.Name == n.d.node && e.Verb == "patch" && e.ResponseStatus.Code == 200 {
			cordoned = true
		}
		if o.Resource == "pods" && o.Subresource == "eviction" && o.Namespace == n.d.ns && e.ResponseStatus.Code == 201 {
			evicted[o.Name] = true
		}
	}
	for _, p := range n.d.webOnNode {
		if !evicted[p] {
			t.Errorf("no accepted eviction of %s by %s before the container went down", p, user)
		}
	}
	if !cordoned {
		t.Errorf("no cordon of %s by %s before the container went down", n.d.node, user)
	}
	node, err := n.d.admin.CoreV1().Nodes().Get(ctxT(t, 10*time.Second), n.d.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.logf("Node %s while down: unschedulable %v, %s %s", node.Name, node.Spec.Unschedulable, cordonAnnoKey, node.Annotations[cordonAnnoKey])
	if !node.Spec.Unschedulable || !strings.Contains(node.Annotations[cordonAnnoKey], `"action":"reboot"`) {
		t.Errorf("Node %s while down: want cordoned by gnsh for a reboot", node.Name)
	}
	// The new boot belongs to the whole suite (its cleanup must not come
	// at the end of this step); it reports to the step meanwhile.
	n.c = c.bootAgain(n.top)
	n.c.t = t
	n.d.reportBoot(t, n.c)
	n.waitUncordoned(60 * time.Second)
}

func (n *ansibleNode) waitUncordoned(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		node, err := n.d.admin.CoreV1().Nodes().Get(ctxT(n.t, 10*time.Second), n.d.node, metav1.GetOptions{})
		if err == nil && !node.Spec.Unschedulable && node.Annotations[cordonAnnoKey] == "" {
			n.c.logf("Node %s uncordoned by the agent after boot", n.d.node)
			return
		}
		if time.Now().After(deadline) {
			j := n.c.in(20*time.Second, "journalctl", "--no-pager", "-b", "-u", "gnsh.service").stdout
			n.t.Fatalf("Node %s not uncordoned %v after boot (%v):\n%s", n.d.node, timeout, err, j)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// repopulate puts the evicted web pods back (the test plays their
// ReplicaSet controller) and waits until the budget allows the next drain.
func (n *ansibleNode) repopulate() {
	t, d := n.t, n.d
	ctx := ctxT(t, 60*time.Second)
	rs, err := d.admin.AppsV1().ReplicaSets(d.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := *metav1.NewControllerRef(rs, rs.GroupVersionKind())
	ref.APIVersion, ref.Kind = "apps/v1", "ReplicaSet"
	for _, p := range d.webOnNode {
		if _, err := d.admin.CoreV1().Pods(d.ns).Create(ctx, drainPod(d.ns, p, d.node, map[string]string{"app": "web"}, ref), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s again: %v", p, err)
		}
	}
	for {
		last := d.readiness(ctx, len(d.webOnNode)+2)
		if last == "" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pods not back after 60 s: %s", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// auditKeep writes the case's audit records to audit.jsonl.
func (n *ansibleNode) auditKeep() {
	evs, err := readAudit(n.d.cp.AuditLog)
	if err != nil {
		return
	}
	var raw bytes.Buffer
	for _, e := range evs {
		if e.User.Username == saUser || e.User.Username == "system:node:"+n.d.node || e.ObjectRef.Namespace == n.d.ns || e.ObjectRef.Name == n.d.node {
			raw.Write(e.raw)
			raw.WriteByte('\n')
		}
	}
	_ = os.WriteFile(filepath.Join(n.dir, "audit.jsonl"), raw.Bytes(), 0o644)
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
