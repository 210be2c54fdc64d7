//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/slots"
)

// TestAnsibleRollingE2E: "reboot every node" with Ansible's default forks
// never has more than one node out. Three Debian 12 nodes of a fresh local
// control plane, gnsh installed on each by the role with gnsh's own
// identity and a limit of one node out (slots.maxUnavailable: 1); then one
// ad-hoc `ansible all -m ansible.builtin.reboot -f 3`. All three reboot
// commands run at once: one is admitted, drains and reboots; the others
// wait for its slot, which its agent frees once the node is back (the test
// plays the kubelet's boot ID report, kwok does not), uncordoned and
// settled. A sampler lists the Nodes every 0.5 s from the play's start to
// its end and must never see more than one of them cordoned or NotReady.
func TestAnsibleRollingE2E(t *testing.T) {
	if os.Getenv("GNSH_E2E_ANSIBLE") == "0" {
		t.Skip("SKIP: GNSH_E2E_ANSIBLE=0")
	}
	const suite = "bookworm"
	gnsh := needGnsh(t)
	needAnsible(t)
	rootfs, _, err := rootfsFlavor(suite, "ansible")
	if err != nil {
		t.Fatalf("rootfs %s (ansible): %v", suite, err)
	}
	cp := &sharedCP{parent: t}
	var nodes []*ansibleNode
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("roll-%d", i)
		dir := freshResults(t, "ansible", suite, name)
		d := &drainCase{suite: suite, node: name, peer: name + "-peer", ns: name, shared: cp}
		d.connect(t)
		d.populate(t)
		n := &ansibleNode{t: t, top: t, suite: name, dir: dir, adir: filepath.Join(dir, "ansible"), gnsh: gnsh, d: d}
		n.c = boot(t, suite, rootfs, dir, bootOpts{persist: persistentRoot(t, rootfs, dir)})
		d.installKubeconfig(n.c)
		d.reportBoot(t, n.c)
		n.setupSSH()
		nodes = append(nodes, n)
	}
	defer func() {
		if t.Failed() {
			markFailed()
		}
	}()

	// One inventory, one ansible.cfg (forks 5, Ansible's default), for the
	// three nodes; each host's own gnsh_config (its Node's name).
	group := filepath.Join(filepath.Dir(nodes[0].dir), "rolling")
	_ = os.RemoveAll(group)
	if err := os.MkdirAll(filepath.Join(group, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := map[string]any{}
	var known []string
	for _, n := range nodes {
		hosts[n.d.node] = map[string]any{
			"ansible_host": "127.0.0.1", "ansible_port": n.port, "ansible_user": "root",
			"ansible_python_interpreter": "/usr/bin/python3", "ansible_ssh_private_key_file": filepath.Join(n.adir, "id_ed25519"),
			"gnsh_config": map[string]any{"node": n.d.node, "drainTimeout": "2m",
				"slots": map[string]any{"maxUnavailable": 1, "settle": "5s", "renew": "5s"}},
		}
		kh, err := os.ReadFile(filepath.Join(n.adir, "known_hosts"))
		if err != nil {
			t.Fatal(err)
		}
		known = append(known, strings.TrimSpace(string(kh)))
	}
	inv, _ := json.MarshalIndent(map[string]any{"kubernetes_nodes": map[string]any{"hosts": hosts}}, "", "  ")
	mustWrite(t, filepath.Join(group, "inventory.json"), string(inv))
	mustWrite(t, filepath.Join(group, "known_hosts"), strings.Join(known, "\n")+"\n")
	cfgText, err := os.ReadFile(filepath.Join(nodes[0].adir, "ansible.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(cfgText), filepath.Join(nodes[0].adir, "known_hosts"), filepath.Join(group, "known_hosts"))
	cfg = strings.Replace(cfg, "forks = 1", "forks = 5", 1)
	mustWrite(t, filepath.Join(group, "ansible.cfg"), cfg)
	home := filepath.Join(group, "home")
	_ = os.MkdirAll(home, 0o700)
	ansible := func(ctx context.Context, log string, argv ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = group
		cmd.Env = append(os.Environ(), "ANSIBLE_CONFIG="+filepath.Join(group, "ansible.cfg"), "ANSIBLE_NOCOLOR=1", "ANSIBLE_FORCE_COLOR=0",
			"HOME="+home, "ANSIBLE_HOME="+filepath.Join(home, ".ansible"))
		f, err := os.Create(filepath.Join(group, log))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fmt.Fprintf(f, "# %s\n", strings.Join(argv, " "))
		cmd.Stdout, cmd.Stderr = f, f
		return cmd
	}

	// The role on all three, gnsh's own identity.
	vars := map[string]any{"gnsh_install_from": "binary", "gnsh_binary_src": gnsh, "gnsh_hosts": "kubernetes_nodes", "gnsh_credentials": "dedicated",
		"gnsh_kubectl": filepath.Join(nodes[0].d.cp.BinDir, "kubectl"), "gnsh_kubectl_kubeconfig": nodes[0].d.cp.AdminKubeconfig}
	vb, _ := json.Marshal(vars)
	mustWrite(t, filepath.Join(group, "vars.json"), string(vb))
	site, _ := filepath.Abs(filepath.Join("..", "..", "install", "ansible", "site.yml"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := ansible(ctx, "01-site.log", "ansible-playbook", "-i", "inventory.json", "-e", "@vars.json", "-v", site).Run(); err != nil {
		t.Fatalf("the role on three nodes: %v\n%s", err, tailFile(filepath.Join(group, "01-site.log"), 4000))
	}
	for _, n := range nodes {
		n.c.must("sh", "-ec", `[ /sbin/shutdown -ef /usr/local/sbin/gnsh ]; systemctl is-active --quiet gnsh.service`)
		n.assertContainerSSH()
	}

	// The sampler: every 0.5 s, the three Nodes cordoned or NotReady.
	stop := make(chan struct{})
	var mu sync.Mutex
	most, samples := 0, 0
	var worst string
	seen := map[string]bool{}
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
			nl, err := nodes[0].d.admin.CoreV1().Nodes().List(sctx, metav1.ListOptions{})
			scancel()
			if err != nil {
				continue
			}
			var out []string
			for _, nd := range nl.Items {
				if !strings.HasPrefix(nd.Name, "roll-") || strings.HasSuffix(nd.Name, "-peer") {
					continue
				}
				if nd.Spec.Unschedulable || !nodeReady(&nd) {
					out = append(out, nd.Name)
				}
			}
			mu.Lock()
			samples++
			for _, o := range out {
				seen[o] = true
			}
			if len(out) > most {
				most, worst = len(out), strings.Join(out, ", ")
			}
			mu.Unlock()
		}
	}()

	// Each container that goes down (rc 133) is booted again, its boot ID
	// reported, as a host and its kubelet would.
	var wg sync.WaitGroup
	reboots := make(chan string, len(nodes))
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-n.c.exited:
			case <-ctx.Done():
				return
			}
			if n.c.exitCode != 133 {
				t.Errorf("%s: nspawn exit code %d, want 133 (reboot)", n.d.node, n.c.exitCode)
				return
			}
			reboots <- n.d.node
			n.c = n.c.bootAgain(t)
			n.d.reportBoot(t, n.c)
		}()
	}
	start := time.Now()
	play := ansible(ctx, "02-reboot.log", "ansible", "all", "-i", "inventory.json", "-f", "3", "-m", "ansible.builtin.reboot",
		"-a", "msg='Reboot initiated by Ansible' reboot_timeout=240 connect_timeout=5 post_reboot_delay=0 test_command='systemctl is-system-running --wait'")
	err = play.Run()
	close(stop)
	wg.Wait()
	close(reboots)
	var order []string
	for r := range reboots {
		order = append(order, r)
	}
	t.Logf("ansible all -m reboot -f 3: %v after %s; reboots in order %v", err, time.Since(start).Round(100*time.Millisecond), order)
	if err != nil {
		t.Fatalf("the play failed: %v\n%s", err, tailFile(filepath.Join(group, "02-reboot.log"), 6000))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("sampler: %d samples, at most %d node(s) out (%s); out at some point: %v", samples, most, worst, seen)
	if most > 1 {
		t.Errorf("the sampler saw %d nodes out at once: %s", most, worst)
	}
	if len(order) != 3 || len(seen) != 3 {
		t.Errorf("reboots %v, nodes seen out %v: want all three, one after the other", order, seen)
	}
	// The last node's slot is freed once it has settled, after the play.
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		rec, _, err := (&slots.Gate{C: nodes[0].d.admin, Namespace: "gnsh", Name: "reboot-slots", APITimeout: 10 * time.Second}).Read(context.Background())
		if err == nil && len(rec.Holders) == 0 && len(rec.Waiters) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("60 s after the play: %+v %v", rec, err)
		}
	}
	// Two of them waited, each slot was taken and freed by the node's
	// agent after its boot: the Events say so.
	evs, err := nodes[0].d.admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range evs.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, "roll-") {
			count[e.Reason]++
			if strings.HasPrefix(e.Reason, "GnshSlot") {
				t.Logf("%s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	if count["GnshSlotWaiting"] < 2 || count["GnshSlotTaken"] != 3 || count["GnshSlotReleased"] != 3 {
		t.Errorf("slot Events %v: want two nodes waiting, three slots taken and freed", count)
	}
	out, _ := os.ReadFile(filepath.Join(group, "02-reboot.log"))
	if strings.Count(string(out), "| CHANGED |") != 3 && strings.Count(string(out), "\"rebooted\": true") != 3 {
		t.Errorf("the play did not report three reboots:\n%s", tailFile(filepath.Join(group, "02-reboot.log"), 4000))
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
