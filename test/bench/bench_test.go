// Package bench compares gnsh's drain with kubectl drain on a real control
// plane (test/internal/controlplane, kwok as the kubelet). Run it with
// `make bench`; see README.md.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/kwok"
)

var (
	resultsFile = flag.String("results", "", "also write the results (Markdown) to this file")
	keepDir     = flag.String("keep", "", "copy each run's tool output and apiserver, audit and kwok logs into this directory")
	gnshBin     = flag.String("gnsh", "", "drain with this gnsh binary instead of building ./cmd/gnsh (to compare builds)")
)

// gnshPkg is the gnsh binary, built from the working tree.
const gnshPkg = "./cmd/gnsh"

type benchCase struct {
	pods  int
	grace int64 // the pods' terminationGracePeriodSeconds
}

func (c benchCase) String() string { return fmt.Sprintf("%d pods, grace %d s", c.pods, c.grace) }

var cases = []benchCase{{110, 0}, {110, 2}, {1000, 0}, {1000, 2}}

const (
	toolGnsh    = "gnsh"
	toolKubectl = "kubectl"
	nodeName    = "bench-node"
	namespace   = "bench"
	// kubectlUser is kubectl's identity: in the group kubeadm binds to
	// cluster-admin (as kubeadm's admin.conf is since 1.29).
	kubectlUser  = "bench-kubectl"
	kubectlGroup = "kubeadm:cluster-admins"
)

// result is one tool's drain of one node.
type result struct {
	c        benchCase
	tool     string
	user     string // the tool's identity in the audit log
	wall     time.Duration
	rssKiB   int64
	requests int
	byKind   map[string]int // "verb resource[/subresource]" -> requests
	codes    map[int]int    // HTTP status -> requests
	setup    time.Duration  // pods created and Ready
	// toFirst is from starting the command to the API server receiving its
	// first request; afterLast from the last response (a watch's ends when
	// the tool closes it) to the command's exit. Both from the audit log's
	// timestamps and this process's clock: one machine, one clock.
	toFirst, afterLast time.Duration
}

// BenchmarkDrain drains a node of N Running, Ready, ReplicaSet-owned pods
// with gnsh and with kubectl drain, each on its own fresh control plane,
// and prints a Markdown table: wall time, API requests (from the audit
// log, by user), peak RSS. Run it with -benchtime 1x (make bench).
func BenchmarkDrain(b *testing.B) {
	root := moduleRoot(b)
	gnsh, err := filepath.Abs(*gnshBin)
	if *gnshBin == "" {
		gnsh = filepath.Join(b.TempDir(), "gnsh")
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", gnsh, gnshPkg)
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", gnshPkg, err, out)
		}
	} else if err != nil {
		b.Fatal(err)
	}
	var results []*result
	var binDir string
	for _, c := range cases {
		for _, tool := range []string{toolGnsh, toolKubectl} {
			b.Run(fmt.Sprintf("pods=%d/grace=%ds/%s", c.pods, c.grace, tool), func(b *testing.B) {
				r, bin := measure(b, c, tool, gnsh)
				results = append(results, r)
				binDir = bin
			})
		}
	}
	if len(results) == 0 {
		return
	}
	md := report(results, machine(root, binDir))
	fmt.Print("\n" + md)
	if *resultsFile != "" {
		if err := os.WriteFile(*resultsFile, []byte(md), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// measure sets up a fresh control plane with one kwok node carrying c.pods
// pods and drains it with tool.
func measure(b *testing.B, c benchCase, tool, gnsh string) (*result, string) {
	cp := controlplane.StartWith(b, controlplane.Options{Kwok: true, Audit: true, Nodes: []string{nodeName}})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS = -1 // no client-side limit for the setup
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	t0 := time.Now()
	setup(b, ctx, cs, c)
	r := &result{c: c, tool: tool, setup: time.Since(t0)}
	b.Logf("%d pods Running and Ready in %v", c.pods, r.setup.Round(time.Millisecond))

	tmp := b.TempDir()
	var argv []string
	switch tool {
	case toolGnsh:
		// The node's own credentials, as on a node (kubelet.conf).
		r.user = "system:node:" + nodeName
		argv = []string{gnsh, "drain", "--node", nodeName, "--kubeconfig", cp.NodeKubeconfig(b, nodeName), "--timeout", "15m"}
	case toolKubectl:
		r.user = kubectlUser
		bindClusterAdmins(b, ctx, cs)
		kc := cp.UserKubeconfig(b, kubectlUser, kubectlGroup)
		// A fresh --cache-dir: discovery as on a node that never ran kubectl.
		argv = []string{filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", kc, "--cache-dir", filepath.Join(tmp, "cache"),
			"drain", nodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--force"}
	}
	logf, err := os.Create(filepath.Join(tmp, tool+".log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, argv[0], argv[1:]...)
	// GNSH_CONFIG: no config file, so gnsh's defaults whatever the host has.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + tmp, "LANG=C", "GNSH_CONFIG=" + filepath.Join(tmp, "none.yaml")}
	cmd.Stdout, cmd.Stderr = logf, logf

	start := time.Now()
	err = cmd.Run()
	end := time.Now()
	r.wall = end.Sub(start)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.rssKiB = ru.Maxrss // KiB on Linux
	}
	if err != nil {
		out, _ := os.ReadFile(logf.Name())
		b.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, tail(string(out), 30))
	}
	left, err := kwok.NodePods(ctx, cs, nodeName)
	if err != nil {
		b.Fatal(err)
	}
	if len(left) > 0 {
		b.Fatalf("%s exited 0 with %d pods left on %s", tool, len(left), nodeName)
	}
	// The audit log is written before each response is sent; a closed
	// watch's last event may trail the tool's exit a little.
	time.Sleep(time.Second)
	a := readAudit(b, cp.AuditLog, r.user)
	r.requests, r.byKind, r.codes = len(a.kinds), a.byKind(), a.byCode()
	r.toFirst, r.afterLast = a.first.Sub(start), end.Sub(a.last)
	if *keepDir != "" {
		keep(b, fmt.Sprintf("pods%d-grace%d-%s", c.pods, c.grace, tool), cp.AuditLog, logf.Name(),
			filepath.Join(filepath.Dir(cp.AuditLog), "kube-apiserver.log"), filepath.Join(filepath.Dir(cp.AuditLog), "kwok.log"))
	}
	b.ReportMetric(float64(r.wall.Nanoseconds()), "ns/op")
	b.ReportMetric(r.wall.Seconds(), "wall-s")
	b.ReportMetric(float64(r.requests), "requests")
	b.ReportMetric(float64(r.rssKiB)/1024, "peak-MiB")
	b.Logf("%s: %.2f s (first request after %v, exit %v after the last answer), %d requests %v, peak RSS %.1f MiB", tool,
		r.wall.Seconds(), r.toFirst.Round(time.Millisecond), r.afterLast.Round(time.Millisecond), r.requests, r.byKind,
		float64(r.rssKiB)/1024)
	return r, cp.BinDir
}

// setup creates a kwok Node, a ReplicaSet and c.pods pods it owns bound
// to the Node, and waits until they are all Running and Ready.
func setup(b *testing.B, ctx context.Context, cs kubernetes.Interface, c benchCase) {
	node := kwok.Node(nodeName, int64(c.pods))
	node.Labels["kubernetes.io/os"] = "linux"
	for _, l := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		l[corev1.ResourceCPU] = resource.MustParse("64")
		l[corev1.ResourceMemory] = resource.MustParse("256Gi")
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, time.Minute, "node Ready", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return kwok.NodeReady(n), "not Ready"
	})
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	spec := corev1.PodSpec{
		Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/web:1"}},
		TerminationGracePeriodSeconds: &c.grace,
	}
	replicas := int32(c.pods)
	rs, err := cs.AppsV1().ReplicaSets(namespace).Create(ctx, kwok.ReplicaSet(namespace, "web", replicas, spec), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// kwok runs the pods at once, and finalises a deleted pod exactly when
	// its grace period ends (as a kubelet whose containers take all of it).
	annotations := kwok.PodAnnotations(time.Duration(c.grace) * time.Second)
	yes := true
	jobs := make(chan int)
	errs := make(chan error, c.pods)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range jobs {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%04d", i), Labels: labels, Annotations: annotations,
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name,
							UID: rs.UID, Controller: &yes, BlockOwnerDeletion: &yes}}},
					Spec: *spec.DeepCopy(),
				}
				pod.Spec.NodeName = nodeName
				if _, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range c.pods {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("create pod: %v", err)
	}
	waitFor(b, 5*time.Minute, "pods Running and Ready", func() (bool, string) {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range list.Items {
			if kwok.RunningReady(&list.Items[i]) {
				ready++
			}
		}
		return ready == c.pods, fmt.Sprintf("%d of %d", ready, c.pods)
	})
}

func bindClusterAdmins(b *testing.B, ctx context.Context, cs kubernetes.Interface) {
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:cluster-admins"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: kubectlGroup}},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
}

// keep copies files into *keepDir with prefix.
func keep(b *testing.B, prefix string, files ...string) {
	if err := os.MkdirAll(*keepDir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*keepDir, prefix+"-"+filepath.Base(f)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func waitFor(b *testing.B, limit time.Duration, what string, cond func() (bool, string)) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not after %v (%s)", what, limit, state)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// audit is one user's requests in the audit log.
type audit struct {
	received    map[string]time.Time // audit ID -> when it came in
	kinds       map[string]string    // audit ID -> "verb resource[/subresource]"
	codes       map[string]int       // audit ID -> HTTP status
	first, last time.Time            // the first request received, the last response completed
}

func (a *audit) byKind() map[string]int {
	m := map[string]int{}
	for _, k := range a.kinds {
		m[k]++
	}
	return m
}

func (a *audit) byCode() map[int]int {
	m := map[int]int{}
	for id := range a.kinds {
		m[a.codes[id]]++ // 0: no ResponseComplete seen
	}
	return m
}

// readAudit reads user's requests from the audit logs (audit.log and any
// rotated audit-*.log): distinct audit IDs, by verb and resource, and by
// response code, and when the first came in and the last was answered.
func readAudit(b *testing.B, auditLog, user string) *audit {
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(auditLog), "audit*.log"))
	if len(files) == 0 {
		b.Fatalf("no audit log at %s", auditLog)
	}
	a := &audit{kinds: map[string]string{}, codes: map[string]int{}, received: map[string]time.Time{}}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			b.Fatal(err)
		}
		s := bufio.NewScanner(fh)
		s.Buffer(make([]byte, 1<<20), 16<<20)
		for s.Scan() {
			line := s.Bytes()
			if !strings.Contains(string(line), `"username":"`+user+`"`) {
				continue
			}
			var ev struct {
				AuditID    string `json:"auditID"`
				Stage      string `json:"stage"`
				Verb       string `json:"verb"`
				RequestURI string `json:"requestURI"`
				User       struct {
					Username string `json:"username"`
				} `json:"user"`
				ObjectRef *struct {
					Resource    string `json:"resource"`
					Subresource string `json:"subresource"`
				} `json:"objectRef"`
				ResponseStatus *struct {
					Code int `json:"code"`
				} `json:"responseStatus"`
				Received time.Time `json:"requestReceivedTimestamp"`
				Stamp    time.Time `json:"stageTimestamp"`
			}
			if err := json.Unmarshal(line, &ev); err != nil {
				b.Fatalf("%s: %v", f, err)
			}
			if ev.User.Username != user {
				continue
			}
			kind := ev.Verb + " "
			if ev.ObjectRef != nil {
				kind += ev.ObjectRef.Resource
				if ev.ObjectRef.Subresource != "" {
					kind += "/" + ev.ObjectRef.Subresource
				}
			} else {
				path, _, _ := strings.Cut(ev.RequestURI, "?")
				kind += path
			}
			a.kinds[ev.AuditID] = kind
			if _, ok := a.received[ev.AuditID]; !ok {
				a.received[ev.AuditID] = ev.Received
			}
			if a.first.IsZero() || ev.Received.Before(a.first) {
				a.first = ev.Received
			}
			if ev.Stage == "ResponseComplete" && ev.ResponseStatus != nil {
				a.codes[ev.AuditID] = ev.ResponseStatus.Code
				if ev.Stamp.After(a.last) {
					a.last = ev.Stamp
				}
			}
		}
		fh.Close()
		if err := s.Err(); err != nil {
			b.Fatal(err)
		}
	}
	return a
}

// report renders the results as Markdown.
func report(rs []*result, mach string) string {
	var sb strings.Builder
	sb.WriteString("# Drain benchmark: gnsh vs kubectl drain\n\n")
	sb.WriteString(mach)
	sb.WriteString("\n| case | tool | wall s | requests | peak RSS MiB | ratio kubectl/gnsh (wall · requests · RSS) |\n")
	sb.WriteString("|---|---|---:|---:|---:|---|\n")
	byCase := map[benchCase]map[string]*result{}
	for _, r := range rs {
		if byCase[r.c] == nil {
			byCase[r.c] = map[string]*result{}
		}
		byCase[r.c][r.tool] = r
	}
	for _, r := range rs {
		ratio := ""
		if g, k := byCase[r.c][toolGnsh], byCase[r.c][toolKubectl]; r.tool == toolKubectl && g != nil {
			ratio = fmt.Sprintf("%s · %s · %s", times(k.wall.Seconds(), g.wall.Seconds()),
				times(float64(k.requests), float64(g.requests)), times(float64(k.rssKiB), float64(g.rssKiB)))
		}
		fmt.Fprintf(&sb, "| %s | %s | %.2f | %d | %.1f | %s |\n", r.c, r.tool, r.wall.Seconds(), r.requests,
			float64(r.rssKiB)/1024, ratio)
	}
	sb.WriteString("\nWhere the requests go (verb resource: count; HTTP status: count), and the time outside them (ms from\n" +
		"starting the command to its first request; from the last response to the command's exit):\n\n")
	sb.WriteString("| case | tool | requests by kind | status codes | first request ms | exit after ms |\n|---|---|---|---|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %d | %d |\n", r.c, r.tool, kindsString(r.byKind), codesString(r.codes),
			r.toFirst.Milliseconds(), r.afterLast.Milliseconds())
	}
	sb.WriteString("\nSetup per case (not measured): a fresh control plane, then the pods created and Running+Ready in ")
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%.1f s", r.setup.Seconds()))
	}
	sb.WriteString(strings.Join(parts, ", ") + " (in table order).\n")
	return sb.String()
}

func times(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

func kindsString(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var s []kv
	for k, v := range m {
		s = append(s, kv{k, v})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].v > s[j].v || s[i].v == s[j].v && s[i].k < s[j].k })
	var parts []string
	for _, e := range s {
		parts = append(parts, fmt.Sprintf("%s: %d", e.k, e.v))
	}
	return strings.Join(parts, ", ")
}

func codesString(m map[int]int) string {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// machine describes the machine, the versions and the method.
func machine(root, binDir string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Run on %s by `make bench` (`go test -run '^$' -bench Drain -benchtime 1x ./test/bench/`).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"))
	sb.WriteString("| | |\n|---|---|\n")
	fmt.Fprintf(&sb, "| CPU | %d × %s |\n", runtime.NumCPU(), cpuModel())
	fmt.Fprintf(&sb, "| memory | %s |\n", memTotal())
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		fmt.Fprintf(&sb, "| kernel | Linux %s |\n", strings.TrimSpace(string(b)))
	}
	fmt.Fprintf(&sb, "| Go | %s (gnsh and the benchmark) |\n", runtime.Version())
	v := readVersions(filepath.Join(binDir, "..", "versions"))
	fmt.Fprintf(&sb, "| Kubernetes | kube-apiserver and kubectl %s, etcd %s, kwok %s (built with %s by test/k8s/build.sh) |\n",
		v["K8S_VERSION"], v["ETCD_VERSION"], v["KWOK_VERSION"], v["GO_VERSION"])
	if *gnshBin != "" {
		fmt.Fprintf(&sb, "| gnsh | the binary %s (-gnsh) |\n", *gnshBin)
	} else {
		fmt.Fprintf(&sb, "| gnsh | %s at %s |\n", gnshPkg, revision(root))
	}
	sb.WriteString(`
Each row is one run on its own fresh control plane (etcd, kube-apiserver with an audit log, the disruption
controller, kwok as the kubelet) and one Node annotated kwok.x-k8s.io/node=fake whose pods are owned by a
ReplicaSet (no ReplicaSet controller runs, so nothing replaces them), Running and Ready when the drain starts.
kwok finalises an evicted pod when its grace period ends; with grace 0 the API server deletes it at once.

* **wall s**: from starting the command to its exit (exit 0, the node's pods all gone).
* **requests**: the tool's API requests in the apiserver audit log, by user (gnsh: the node's own client
  certificate, system:node:NAME; kubectl: a client certificate in group kubeadm:cluster-admins, bound to
  cluster-admin); a watch counts once.
* **peak RSS**: the child's rusage maxrss.
* gnsh: ` + "`gnsh drain --node NODE --kubeconfig NODE.kubeconfig --timeout 15m`" + `, built with CGO_ENABLED=0
  -trimpath -ldflags "-s -w" (as make build). kubectl: ` + "`kubectl drain NODE --ignore-daemonsets --delete-emptydir-data --force`" + `
  with a fresh --cache-dir (discovery not cached) and its default client rate limit.
`)
	return sb.String()
}

// revision is the commit the gnsh binary was built from, naming any
// uncommitted changes to what goes into it.
func revision(root string) string {
	rev, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "an unknown commit"
	}
	s := "commit " + strings.TrimSpace(string(rev))
	dirty, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--", "cmd", "internal", "go.mod", "go.sum").Output()
	var files []string
	// Each line is "XY PATH": the status columns may start with a space,
	// so the output is not trimmed before it is split.
	for _, l := range strings.Split(strings.TrimRight(string(dirty), "\n"), "\n") {
		if len(l) > 3 {
			files = append(files, l[3:])
		}
	}
	if len(files) > 0 {
		s += " with uncommitted changes to " + strings.Join(files, ", ")
	}
	return s
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

func readVersions(path string) map[string]string {
	m := map[string]string{}
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

func moduleRoot(b *testing.B) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		b.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
