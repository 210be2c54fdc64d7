package gnshcli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/handoff"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// gnsh config check validates a file at any path as the wrapper reads it:
// every problem on its own line, with its line and the key's path (issue
// 19: a nested typo was found only when someone typed reboot).
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	kc := writeFile(t, dir, "kubeconfig", "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\n"+
		"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n")
	for _, tt := range []struct {
		name, content string
		args          []string
		code          int
		stdout        string
		stderr        []string
	}{
		{"valid", "slots:\n  maxUnavailable: 2\n", nil, 0, "gnsh: FILE is valid\n", nil},
		{"valid, kubeconfig there", "kubeconfig: " + kc + "\n", nil, 0, "gnsh: FILE is valid\n", nil},
		{"nested typo", "drainTimeout: 2m\nslots: {maxUnavalable: 2}\n", nil, 1, "",
			[]string{"gnsh: FILE: line 2: slots.maxUnavalable: unknown key; did you mean maxUnavailable?"}},
		{"every problem", "drian: false\nslots:\n  pools:\n  - name: gpu\n    selektor: pool=gpu\n", nil, 1, "", []string{
			"gnsh: FILE: line 1: drian: unknown key; did you mean drain?",
			"gnsh: FILE: line 4: slots.pools[0].maxUnavailable: must be 1 or more",
			"gnsh: FILE: line 5: slots.pools[0].selektor: unknown key; did you mean selector?"}},
		// One run: every type error, every range check and the kubeconfig
		// named, each with its line (issue 19: only drainTimeout was said).
		{"every problem at once", "drainTimeout: -5s\nkubeconfig: /nonexistent/kubeconfig\nslots: {gate: maybe, maxUnavailable: 0}\nevents: 'no'\n", nil, 1, "", []string{
			`gnsh: FILE: line 1: drainTimeout: must be a positive duration such as 90s, 10m or 1h (or seconds), not "-5s"`,
			"gnsh: FILE: line 2: kubeconfig: /nonexistent/kubeconfig does not exist; fix the kubeconfig key or remove it " +
				"(gnsh then looks in $KUBECONFIG, /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig, /etc/gnsh/kubeconfig): until then every shutdown through gnsh is refused, but with --no-drain",
			`gnsh: FILE: line 3: slots.gate: "maybe" is not a gate mode; use off, optional or required`,
			"gnsh: FILE: line 3: slots.maxUnavailable: must be 1 or more; slots.gate: off turns the gate off",
			"gnsh: FILE: line 4: events: must be true or false, not a quoted string; leave out the quotes"}},
		{"bad value", "slots:\n  gate: maybe\n", nil, 1, "",
			[]string{`gnsh: FILE: line 2: slots.gate: "maybe" is not a gate mode; use off, optional or required`}},
		{"kubeconfig not there", "drainTimeout: 2m\nkubeconfig: /nonexistent/kubeconfig\n", nil, 1, "", []string{
			"gnsh: FILE: line 2: kubeconfig: /nonexistent/kubeconfig does not exist; fix the kubeconfig key or remove it " +
				"(gnsh then looks in $KUBECONFIG, /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig, /etc/gnsh/kubeconfig): until then every shutdown through gnsh is refused, but with --no-drain"}},
		{"kubeconfig not there, skipped", "kubeconfig: /nonexistent/kubeconfig\n", []string{"--skip-kubeconfig"}, 0, "gnsh: FILE is valid\n", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, out, errb := testEnv(t)
			f := writeFile(t, t.TempDir(), "candidate.yaml", tt.content)
			args := append(append([]string{"gnsh", "config", "check"}, tt.args...), f)
			code := Run(context.Background(), args, env)
			want := strings.ReplaceAll(strings.Join(tt.stderr, "\n"), "FILE", f)
			if want != "" {
				want += "\n"
			}
			if code != tt.code || out.String() != strings.ReplaceAll(tt.stdout, "FILE", f) || errb.String() != want {
				t.Errorf("exit %d, stdout %q, stderr\n%s\nwant exit %d, stderr\n%s", code, out, errb, tt.code, want)
			}
		})
	}
}

// Without FILE: $GNSH_CONFIG, else /etc/gnsh/config.yaml; an absent file
// is the defaults, a FILE named that is absent a typo.
func TestConfigCheckDefaults(t *testing.T) {
	env, out, errb := testEnv(t)
	absent := filepath.Join(t.TempDir(), "config.yaml")
	env.LookupEnv = func(k string) (string, bool) { return absent, k == "GNSH_CONFIG" }
	if code := Run(context.Background(), []string{"gnsh", "config", "check"}, env); code != 0 || out.String() != "gnsh: no "+absent+": the defaults apply\n" {
		t.Errorf("exit %d, %q %q", code, out, errb)
	}
	out.Reset()
	if code := Run(context.Background(), []string{"gnsh", "config", "check", absent}, env); code != 1 || errb.String() != "gnsh: "+absent+" does not exist\n" {
		t.Errorf("exit %d, %q %q", code, out, errb)
	}
	// A link to nothing is not an absent file (issue 19), named or not.
	link := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.Symlink("/nonexistent/gnsh.yaml", link); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"gnsh", "config", "check", link}, {"gnsh", "config", "check"}} {
		env.LookupEnv = func(k string) (string, bool) { return link, k == "GNSH_CONFIG" }
		out.Reset()
		errb.Reset()
		if code := Run(context.Background(), args, env); code != 1 || out.Len() != 0 ||
			errb.String() != "gnsh: "+link+": a symbolic link to /nonexistent/gnsh.yaml, which does not exist; point it at the config file, or remove it for the defaults\n" {
			t.Errorf("%q: exit %d, %q %q", args, code, out, errb)
		}
	}
	errb.Reset()
	if code := Run(context.Background(), []string{"gnsh", "config", "check", "a", "b"}, env); code != 1 || strings.Count(errb.String(), "\n") != 1 ||
		!strings.Contains(errb.String(), "config check takes one FILE at most") {
		t.Errorf("exit %d, %q", code, errb)
	}
}

// gnsh config show: every key with the value in effect.
func TestConfigShow(t *testing.T) {
	env, out, errb := testEnv(t)
	f := writeFile(t, t.TempDir(), "c.yaml", "drainTimeout: 90s\nslots: {gate: required}\n")
	if code := Run(context.Background(), []string{"gnsh", "config", "show", f}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, w := range []string{"drainTimeout: 1m30s\n", "  gate: required\n", "apiTimeout: 5s\n", "  maxUnavailable: 1\n"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("%q lacks %q", out, w)
		}
	}
	// No "null": the value a shutdown uses, or what an unset key means
	// (issue 19: wait: null, podGracePeriod: null).
	for _, w := range []string{"\npodGracePeriod: null # unset: each pod's own grace period\n", "\n  wait: 1m30s # unset: drainTimeout\n",
		"\n  pools: []\n", "\n  window: null # unset: no window: queued reboots are admitted at any hour\n", "\n  kubeconfig: \"\" # unset: /etc/gnsh/kubeconfig if it is there, else the drain's\n", "\nkubeconfig: \"\" # unset: $KUBECONFIG, /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig, then /etc/gnsh/kubeconfig\n"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("%s\nlacks %q", out, w)
		}
	}
	if n := strings.Count(out.String(), "null"); n != 2 {
		t.Errorf("%d nulls:\n%s", n, out)
	}
	// What it prints is a config file that says the same, strings that
	// YAML 1.1 reads as booleans included.
	f = writeFile(t, t.TempDir(), "c.yaml", "node: \"on\"\nkubeconfig: /etc/gnsh/1e5\nslots:\n  wait: 2m\n  window: {days: \"sat,sun\", start: \"2:00\", end: \"05:00\", timeZone: Europe/Berlin}\n  pools: [{name: \"no\", selector: \"0x1\", maxUnavailable: 2}, {name: \"123\", selector: \"zone in (a,b)\", maxUnavailable: 1}]\npodGracePeriod: 0\n")
	want, err := config.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := Run(context.Background(), []string{"gnsh", "config", "show", f}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if got, err := config.Parse(out.Bytes()); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("%+v %v, want %+v:\n%s", got, err, want, out)
	}
	bad := writeFile(t, t.TempDir(), "c.yaml", "slots: {maxUnavalable: 2}\n")
	errb.Reset()
	if code := Run(context.Background(), []string{"gnsh", "config", "show", bad}, env); code != 1 ||
		errb.String() != "gnsh: "+bad+": line 1: slots.maxUnavalable: unknown key; did you mean maxUnavailable?\n" {
		t.Errorf("exit %d: %q", code, errb)
	}
}

// gnsh plan exits with the status the command would have, and carries it
// and the message in its JSON: 1 for an invalid config file or a
// kubeconfig named that is not there (issue 19: it said "exit_code": 0).
func TestPlanRefusedByConfig(t *testing.T) {
	for _, tt := range []struct {
		name, config string
		args         []string
		code         int
		stderr       string
	}{
		{"nested typo", "slots: {maxUnavalable: 2}\n", []string{"reboot"}, 1,
			": line 1: slots.maxUnavalable: unknown key; did you mean maxUnavailable?\ngnsh: nothing was shut down; fix the file, or run the command again with --no-drain\n"},
		{"kubeconfig not there", "kubeconfig: /nonexistent/kubeconfig\n", []string{"shutdown", "-r", "+5"}, 1,
			": /nonexistent/kubeconfig does not exist; nothing was shut down: fix the kubeconfig key or remove it"},
		// The refusal lists every problem, the kubeconfig an invalid file
		// names among them.
		{"every problem", "drainTimeout: soon\nkubeconfig: /nonexistent/kubeconfig\nslots: {gate: maybe}\n", []string{"reboot"}, 1,
			`: line 1: drainTimeout: must be a positive duration such as 90s, 10m or 1h (or seconds), not "soon"` + "\ngnsh: " + "CFG" +
				": line 2: kubeconfig: /nonexistent/kubeconfig does not exist; fix the kubeconfig key or remove it (gnsh then looks in $KUBECONFIG, /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig, /etc/gnsh/kubeconfig)\ngnsh: " +
				"CFG" + `: line 3: slots.gate: "maybe" is not a gate mode; use off, optional or required` + "\ngnsh: nothing was shut down; fix the file, or run the command again with --no-drain\n"},
		{"--no-drain", "slots: {maxUnavalable: 2}\n", []string{"reboot", "--no-drain"}, 0, ""},
		{"-f", "slots: {maxUnavalable: 2}\n", []string{"reboot", "-f"}, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, out, errb := testEnv(t)
			cfg := writeFile(t, t.TempDir(), "config.yaml", tt.config)
			env.NewDrainer = func() *drainer.Drainer {
				return &drainer.Drainer{Stderr: errb, Getenv: func(string) string { return "" }, ConfigPath: cfg, KubeRoot: t.TempDir()}
			}
			code := Run(context.Background(), append([]string{"gnsh", "plan", "-o", "json"}, tt.args...), env)
			var p handoff.Plan
			if err := json.Unmarshal(out.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if code != tt.code || p.ExitCode != tt.code || !strings.Contains(p.Stderr, strings.ReplaceAll(tt.stderr, "CFG", cfg)) || errb.String() != p.Stderr {
				t.Errorf("exit %d, exit_code %d, stderr %q (printed %q); want %d, …%s…", code, p.ExitCode, p.Stderr, errb, tt.code, tt.stderr)
			}
			if tt.code == 0 {
				return
			}
			// Refused before the hand-off: no call that shuts down.
			for _, c := range p.Calls {
				if strings.Contains(c.Method, "Reboot") || strings.Contains(c.Method, "Schedule") || c.Service == "kernel" {
					t.Errorf("refused, yet %+v", c)
				}
			}
			if !strings.HasPrefix(p.Drain, "refuse: ") {
				t.Errorf("drain %q", p.Drain)
			}
		})
	}
}

// A kubeconfig's path is quoted back by gnsh config check and gnsh plan's
// drain row: what must not reach a terminal raw (an escape sequence, a
// bidirectional override) is escaped there, as everywhere else.
func TestConfigMessagesTerminalSafe(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "config.yaml", "kubeconfig: \"/tmp/\\e[2J\\u202ex\"\n")
	env, out, errb := testEnv(t)
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{KubeRoot: dir, Getenv: func(string) string { return "" }}
	}
	code := Run(context.Background(), []string{"gnsh", "config", "check", cfg}, env)
	if code != 1 || strings.ContainsAny(errb.String(), "\x1b\u202e") || !strings.Contains(errb.String(), `/tmp/\x1b[2J\u202ex does not exist`) {
		t.Errorf("config check: exit %d, stderr %q", code, errb)
	}
	env, out, errb = testEnv(t)
	env.LookupEnv = func(k string) (string, bool) { return map[string]string{"GNSH_CONFIG": cfg}[k], k == "GNSH_CONFIG" }
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{KubeRoot: dir, ConfigPath: cfg, Getenv: func(string) string { return "" }}
	}
	code = Run(context.Background(), []string{"gnsh", "plan", "reboot"}, env)
	if code != 1 || strings.ContainsAny(out.String()+errb.String(), "\x1b\u202e") || !strings.Contains(out.String(), `/tmp/\x1b[2J\u202ex`) {
		t.Errorf("plan: exit %d, stdout %q, stderr %q", code, out, errb)
	}
}

// gnsh config check as a user who may not read the kubeconfig the file
// names (or the file) does not say "valid": it says what it could not
// check and to run it as root, and exits 1, as the wrapper refuses a drain
// it cannot make (issue 19).
func TestConfigCheckNotRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (to run a check as user nobody)")
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kc := writeFile(t, dir, "kubeconfig", "apiVersion: v1\nkind: Config\n")
	if err := os.Chmod(kc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, dir, "config.yaml", "drainTimeout: 2m\nkubeconfig: "+kc+"\n")
	secret := writeFile(t, dir, "secret.yaml", "drain: true\n")
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gnshcli.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// gnsh's own kubeconfig, used by a file that names none.
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "etc", "gnsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	own := writeFile(t, filepath.Join(root, "etc", "gnsh"), "kubeconfig", "apiVersion: v1\nkind: Config\n")
	if err := os.Chmod(own, 0o600); err != nil {
		t.Fatal(err)
	}
	unnamed := writeFile(t, dir, "unnamed.yaml", "drainTimeout: 2m\n")
	for _, tt := range []struct{ file, root, stdout, stderr string }{
		{cfg, "", "", "gnsh: " + cfg + ": line 2: kubeconfig: not checked: this user may not read " + kc +
			" (permission denied); run gnsh config check as root, as every shutdown through gnsh runs\n"},
		{secret, "", "", "gnsh: this user may not read " + secret + " (permission denied); run the command as root\n"},
		{unnamed, root, "", "gnsh: " + unnamed + ": kubeconfig: not set, so gnsh's own " + own + " is used; not checked: this user may not read " + own +
			" (permission denied); run gnsh config check as root, as every shutdown through gnsh runs\n"},
	} {
		cmd := exec.Command(bin, "-test.run=^TestHelperConfigCheck$")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		cmd.Env = []string{"GNSH_CLI_HELPER=" + tt.file, "GNSH_CLI_HELPER_ROOT=" + tt.root, "HOME=/nonexistent"}
		out, err := cmd.Output()
		var got struct {
			Code           int
			Stdout, Stderr string
		}
		if jerr := json.Unmarshal([]byte(strings.SplitN(string(out), "\n", 2)[0]), &got); jerr != nil {
			t.Fatalf("helper: %v %v: %s", err, jerr, out)
		}
		if got.Code != 1 || got.Stdout != tt.stdout || got.Stderr != tt.stderr {
			t.Errorf("as nobody: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", got.Code, got.Stdout, got.Stderr, tt.stderr)
		}
	}
}

// TestHelperConfigCheck runs gnsh config check on $GNSH_CLI_HELPER for
// TestConfigCheckNotRoot, and prints what it said as one JSON line.
func TestHelperConfigCheck(t *testing.T) {
	file := os.Getenv("GNSH_CLI_HELPER")
	if file == "" {
		t.Skip("helper for TestConfigCheckNotRoot")
	}
	env, out, errb := testEnv(t)
	root := os.Getenv("GNSH_CLI_HELPER_ROOT")
	if root == "" {
		root = t.TempDir()
	}
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Getenv: func(string) string { return "" }, KubeRoot: root}
	}
	code := Run(context.Background(), []string{"gnsh", "config", "check", file}, env)
	b, _ := json.Marshal(map[string]any{"Code": code, "Stdout": out.String(), "Stderr": errb.String()})
	fmt.Println(string(b))
}

// A file that names no kubeconfig is checked with gnsh's own
// /etc/gnsh/kubeconfig when that is the one a shutdown uses: broken, it
// refuses every shutdown, so config check does not say "valid" (doctor's
// kubeconfig check says it too). --skip-kubeconfig leaves it out.
func TestConfigCheckGnshOwnKubeconfig(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc", "gnsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	own := writeFile(t, filepath.Join(root, "etc", "gnsh"), "kubeconfig", "not: [a kubeconfig\n")
	f := writeFile(t, t.TempDir(), "c.yaml", "drainTimeout: 2m\n")
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{f}, 1, "", "gnsh: " + f + ": kubeconfig: not set, so gnsh's own kubeconfig is used, and " + own + " is not a usable kubeconfig (error loading config file \"" + own +
			"\": yaml: line 1: did not find expected ',' or ']'); fix " + own + " (the Ansible role writes it when given gnsh_kubectl_kubeconfig) or remove it " +
			"(the reboot-slot gate then uses the drain's kubeconfig): until then every shutdown through gnsh is refused, but with --no-drain\n"},
		{[]string{f, "--skip-kubeconfig"}, 0, "gnsh: " + f + " is valid\n", ""},
	} {
		env, out, errb := testEnv(t)
		env.NewDrainer = func() *drainer.Drainer {
			return &drainer.Drainer{Getenv: func(string) string { return "" }, KubeRoot: root}
		}
		code := Run(context.Background(), append([]string{"gnsh", "config", "check"}, tt.args...), env)
		if code != tt.code || out.String() != tt.stdout || errb.String() != tt.stderr {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, out, errb, tt.code, tt.stdout, tt.stderr)
		}
	}
}

// Options after FILE are options, as an admin types them (issue 19:
// "takes one FILE at most (got 2 arguments)"); an unknown one is one line.
func TestConfigCheckOptionsAfterFile(t *testing.T) {
	f := writeFile(t, t.TempDir(), "c.yaml", "kubeconfig: /nonexistent/kubeconfig\n")
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"check", f, "--skip-kubeconfig"}, 0, "gnsh: " + f + " is valid\n", ""},
		{[]string{"check", "--skip-kubeconfig", f}, 0, "gnsh: " + f + " is valid\n", ""},
		{[]string{"check", f, "--bogus"}, 1, "", "gnsh: unknown option --bogus; see 'gnsh config check --help'\n"},
		{[]string{"check", f, "other.yaml"}, 1, "", "gnsh: config check takes one FILE at most (got 2 arguments); see 'gnsh config check --help'\n"},
		{[]string{"check", "--", "--skip-kubeconfig"}, 1, "", "gnsh: --skip-kubeconfig does not exist\n"},
		{[]string{"show", f, "--skip-kubeconfig"}, 1, "", "gnsh: unknown option --skip-kubeconfig; see 'gnsh config show --help'\n"},
	} {
		env, out, errb := testEnv(t)
		code := Run(context.Background(), append([]string{"gnsh", "config"}, tt.args...), env)
		if code != tt.code || out.String() != tt.stdout || errb.String() != tt.stderr {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, out, errb, tt.code, tt.stdout, tt.stderr)
		}
	}
	env, out, _ := testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "config", "check", f, "--help"}, env); code != 0 || !strings.Contains(out.String(), "USAGE:") {
		t.Errorf("check FILE --help: exit %d, %q", code, out)
	}
}
