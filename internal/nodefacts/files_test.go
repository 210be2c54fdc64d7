package nodefacts

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tree writes files below a new root: a value "-> TARGET" makes a
// symbolic link, a value "+x CONTENT" an executable file.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasPrefix(v, "-> "):
			err = os.Symlink(strings.TrimPrefix(v, "-> "), full)
		case strings.HasPrefix(v, "+x "):
			err = os.WriteFile(full, []byte(strings.TrimPrefix(v, "+x ")), 0o755)
		default:
			err = os.WriteFile(full, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	kubeletDropIn = "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=60\n"
	uuDropIn      = "[Login]\nInhibitDelayMaxSec=30\n"
	uuName        = "unattended-upgrades-logind-maxdelay.conf"
)

// The unattended-upgrades trap: its drop-in in /usr/lib sorts after
// kubelet's 99-kubelet.conf in /etc and wins, whatever the directory.
func TestReadLogindConf(t *testing.T) {
	for _, tt := range []struct {
		name     string
		files    map[string]string
		eff      string
		effSec   float64
		effFile  string
		nFiles   int
		checkErr bool
	}{
		{"nothing", map[string]string{}, "5s", 5, "", 0, false},
		{"main file commented out", map[string]string{"/etc/systemd/logind.conf": "[Login]\n#InhibitDelayMaxSec=5\n"}, "5s", 5, "", 1, false},
		{"main file sets it", map[string]string{"/etc/systemd/logind.conf": "[Login]\nInhibitDelayMaxSec=1min 30s\n"},
			"1m30s", 90, "/etc/systemd/logind.conf", 1, false},
		{"kubelet's drop-in", map[string]string{
			"/etc/systemd/logind.conf":                     "[Login]\nInhibitDelayMaxSec=10\n",
			"/etc/systemd/logind.conf.d/99-kubelet.conf":   kubeletDropIn,
			"/etc/systemd/logind.conf.d/50-other.conf":     "[Login]\nKillUserProcesses=no\n",
			"/etc/systemd/logind.conf.d/README":            "InhibitDelayMaxSec=1\n",
			"/etc/systemd/logind.conf.d/10-wrong-sec.conf": "[Other]\nInhibitDelayMaxSec=1\n",
		}, "1m0s", 60, "/etc/systemd/logind.conf.d/99-kubelet.conf", 4, false},
		{"unattended-upgrades caps kubelet's", map[string]string{
			"/etc/systemd/logind.conf.d/99-kubelet.conf":  kubeletDropIn,
			"/usr/lib/systemd/logind.conf.d/" + uuName:    uuDropIn,
			"/usr/lib/systemd/logind.conf.d/00-base.conf": "[Login]\nInhibitDelayMaxSec=120\n",
		}, "30s", 30, "/usr/lib/systemd/logind.conf.d/" + uuName, 3, false},
		{"masked in /etc", map[string]string{
			"/etc/systemd/logind.conf.d/99-kubelet.conf": kubeletDropIn,
			"/etc/systemd/logind.conf.d/" + uuName:       "-> /dev/null",
			"/usr/lib/systemd/logind.conf.d/" + uuName:   uuDropIn,
		}, "1m0s", 60, "/etc/systemd/logind.conf.d/99-kubelet.conf", 2, false},
		{"same name in /etc overrides /usr/lib", map[string]string{
			"/etc/systemd/logind.conf.d/" + uuName:     "[Login]\nInhibitDelayMaxSec=300\n",
			"/usr/lib/systemd/logind.conf.d/" + uuName: uuDropIn,
		}, "5m0s", 300, "/etc/systemd/logind.conf.d/" + uuName, 1, false},
		{"a later zz- drop-in wins", map[string]string{
			"/usr/lib/systemd/logind.conf.d/" + uuName:         uuDropIn,
			"/run/systemd/logind.conf.d/zz-gnsh.conf":          "[Login]\nInhibitDelayMaxSec=infinity\n",
			"/usr/local/lib/systemd/logind.conf.d/11-foo.conf": "[Login]\nInhibitDelayMaxSec=7\n",
		}, "infinity", -1, "/run/systemd/logind.conf.d/zz-gnsh.conf", 3, false},
		{"empty value resets", map[string]string{
			"/etc/systemd/logind.conf":                  "[Login]\nInhibitDelayMaxSec=60\n",
			"/etc/systemd/logind.conf.d/50-reset.conf":  "[Login]\nInhibitDelayMaxSec=\n",
			"/etc/systemd/logind.conf.d/60-broken.conf": "[Login]\nInhibitDelayMaxSec=soon\n",
		}, "5s", 5, "/etc/systemd/logind.conf.d/50-reset.conf", 3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := ReadLogindConf(tree(t, tt.files))
			if f.Effective != tt.eff || f.EffectiveSec != tt.effSec || f.EffectiveFile != tt.effFile || len(f.Files) != tt.nFiles {
				t.Fatalf("got %+v", f)
			}
			hasErr := false
			for _, cf := range f.Files {
				hasErr = hasErr || cf.Error != ""
			}
			if hasErr != tt.checkErr {
				t.Fatalf("file errors %v, want %v: %+v", hasErr, tt.checkErr, f.Files)
			}
		})
	}
}

func TestLogindConfOrder(t *testing.T) {
	root := tree(t, map[string]string{
		"/etc/systemd/logind.conf":                   "",
		"/etc/systemd/logind.conf.d/99-kubelet.conf": kubeletDropIn,
		"/usr/lib/systemd/logind.conf.d/" + uuName:   uuDropIn,
		"/run/systemd/logind.conf.d/10-a.conf":       "[Login]\n",
	})
	f := ReadLogindConf(root)
	var got []string
	for _, cf := range f.Files {
		got = append(got, cf.Path+"="+cf.InhibitDelayMaxSec)
	}
	want := "/etc/systemd/logind.conf= /run/systemd/logind.conf.d/10-a.conf= /etc/systemd/logind.conf.d/99-kubelet.conf=60 " +
		"/usr/lib/systemd/logind.conf.d/" + uuName + "=30"
	if strings.Join(got, " ") != want {
		t.Fatalf("order:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

func TestParseTimespan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30": 30 * time.Second, "30s": 30 * time.Second, "1min 30s": 90 * time.Second, "1min30s": 90 * time.Second,
		"2.5s": 2500 * time.Millisecond, "500ms": 500 * time.Millisecond, "1h": time.Hour, "2m": 2 * time.Minute,
		" 45sec ": 45 * time.Second, "infinity": math.MaxInt64, "1w": 7 * 24 * time.Hour,
	} {
		if got, err := ParseTimespan(in); err != nil || got != want {
			t.Errorf("ParseTimespan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "5 parsecs", "s"} {
		if got, err := ParseTimespan(in); err == nil {
			t.Errorf("ParseTimespan(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseKubeletConfig(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		req        float64
		grace      string
		err        bool
	}{
		{"unset", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", 0, "", false},
		{"set", "kind: KubeletConfiguration\nshutdownGracePeriod: 1m30s\nshutdownGracePeriodCriticalPods: 10s\n", 90, "1m30s", false},
		{"zero", "shutdownGracePeriod: 0s\n", 0, "0s", false},
		{"by priority", "shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 20\n- priority: 2000000000\n  shutdownGracePeriodSeconds: 15\n", 35, "30s", false},
		{"bad duration", "shutdownGracePeriod: soon\n", 0, "", true},
		{"not yaml", "{{", 0, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseKubeletConfig([]byte(tt.yaml))
			if (err != nil) != tt.err || f.RequestedSec != tt.req || f.ShutdownGracePeriod != tt.grace {
				t.Fatalf("got %+v, %v", f, err)
			}
		})
	}
}

func TestReadKubeletMissingAndPath(t *testing.T) {
	root := tree(t, map[string]string{"/etc/kubelet.yaml": "shutdownGracePeriod: 45s\n"})
	f := readKubelet(&Sources{Root: root})
	if f.Error == "" || f.ConfigPath != DefaultKubeletConfig || !strings.Contains(f.Error, DefaultKubeletConfig) {
		t.Fatalf("missing: %+v", f)
	}
	f = readKubelet(&Sources{Root: root, KubeletConfig: "/etc/kubelet.yaml"})
	if f.Error != "" || f.RequestedSec != 45 || f.ConfigPath != "/etc/kubelet.yaml" {
		t.Fatalf("given: %+v", f)
	}
}

// A Debian-like tree: merged /usr, systemd-sysv's links to systemctl, and
// gnsh in /usr/local/sbin.
func commandTree(t *testing.T, extra map[string]string) (root, self string) {
	files := map[string]string{
		"/sbin":                 "-> usr/sbin",
		"/bin":                  "-> usr/bin",
		"/usr/bin/systemctl":    "+x systemctl",
		"/usr/sbin/reboot":      "-> /bin/systemctl",
		"/usr/sbin/shutdown":    "-> /bin/systemctl",
		"/usr/sbin/poweroff":    "-> /bin/systemctl",
		"/usr/sbin/halt":        "-> /bin/systemctl",
		"/usr/local/sbin/gnsh":  "+x gnsh",
		"/usr/local/bin/halt":   "not executable",
		"/opt/other/sbin/halt":  "+x something else",
		"/usr/local/sbin/notes": "",
	}
	for k, v := range extra {
		files[k] = v
	}
	root = tree(t, files)
	return root, filepath.Join(root, "/usr/local/sbin/gnsh")
}

func TestResolveCommands(t *testing.T) {
	gnshLinks := map[string]string{
		"/usr/local/sbin/reboot":   "-> gnsh",
		"/usr/local/sbin/shutdown": "-> /usr/local/sbin/gnsh",
		"/usr/local/sbin/poweroff": "-> ../sbin/gnsh",
		"/usr/local/sbin/halt":     "-> /usr/local/sbin/reboot", // a chain
		"/etc/sudoers": "Defaults\tenv_reset\n" +
			"Defaults\tsecure_path=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\n" +
			"#includedir /etc/sudoers.d\n",
		// RHEL's secure_path, without /usr/local/sbin, set later in sudoers.d.
		"/etc/sudoers.d/zz-rhel":      "Defaults    secure_path = /sbin:/bin:/usr/sbin:/usr/bin\n",
		"/etc/sudoers.d/skipped.conf": "Defaults secure_path=/nowhere\n",
	}
	root, self := commandTree(t, gnshLinks)
	root0 := func() int { return 0 }
	f := resolveCommands(&Sources{Root: root, Self: self, Euid: root0, Getenv: func(k string) string {
		if k == "PATH" {
			return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		}
		return ""
	}})
	if f.RootPathFrom != "$PATH" {
		t.Errorf("root path from %q", f.RootPathFrom)
	}
	// ansible.builtin.reboot finds /sbin/shutdown first, not the link in
	// /usr/local/sbin.
	if a := f.Ansible; a.Path != "/sbin/shutdown" || a.Is != "systemctl" {
		t.Errorf("ansible %+v", a)
	}
	if f.SecurePath != "/sbin:/bin:/usr/sbin:/usr/bin" || f.SudoersErr != "" {
		t.Fatalf("secure_path %q (%s)", f.SecurePath, f.SudoersErr)
	}
	for _, r := range f.Root {
		if r.Is != "gnsh" || r.Target != "/usr/local/sbin/gnsh" || !strings.HasPrefix(r.Path, "/usr/local/sbin/") {
			t.Errorf("root %+v", r)
		}
	}
	for _, r := range f.Sudo {
		if r.Is != "systemctl" || r.Path != "/sbin/"+r.Name || r.Target != "/usr/bin/systemctl" {
			t.Errorf("sudo %+v", r)
		}
	}
	// With gnsh over /usr/sbin's links (what dpkg-divert and ln -sf do),
	// both resolve to gnsh.
	root, self = commandTree(t, map[string]string{"/usr/sbin/reboot": "-> /usr/local/sbin/gnsh"})
	f = resolveCommands(&Sources{Root: root, Self: self, Euid: root0, Getenv: func(string) string { return "" }})
	if f.RootPath != DefaultRootPath || f.RootPathFrom != "default" || f.SecurePath != "" || f.Sudo != nil {
		t.Fatalf("defaults: %+v", f)
	}
	got := map[string]string{}
	for _, r := range f.Root {
		got[r.Name] = r.Is + " " + r.Path
	}
	want := map[string]string{"reboot": "gnsh /usr/sbin/reboot", "shutdown": "systemctl /usr/sbin/shutdown",
		"poweroff": "systemctl /usr/sbin/poweroff", "halt": "systemctl /usr/sbin/halt"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	// Under sudo, or as another user, $PATH is not root's.
	for _, s := range []*Sources{
		{Root: root, Self: self, Euid: root0, Getenv: envOf(map[string]string{"PATH": "/opt/other/sbin", "SUDO_USER": "alice"})},
		{Root: root, Self: self, Euid: func() int { return 1000 }, Getenv: envOf(map[string]string{"PATH": "/opt/other/sbin"})},
	} {
		if f := resolveCommands(s); f.RootPath != DefaultRootPath || f.RootPathFrom != "default" || f.Root[0].Is != "gnsh" {
			t.Errorf("not a root shell: %+v", f)
		}
	}
	// A PATH with only other things in it.
	f = resolveCommands(&Sources{Root: root, Self: self, Euid: root0, Getenv: func(k string) string {
		if k == "PATH" {
			return "/opt/other/sbin:relative:/usr/local/bin"
		}
		return ""
	}})
	for _, r := range f.Root {
		want := "missing"
		if r.Name == "halt" {
			want = "other"
		}
		if r.Is != want {
			t.Errorf("%+v, want %s", r, want)
		}
	}
}

func TestResolveInLoop(t *testing.T) {
	root := tree(t, map[string]string{"/a": "-> /b", "/b": "-> a"})
	if _, err := ResolveIn(root, "/a"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Fatalf("loop: %v", err)
	}
}

func TestSecurePath(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no sudoers", map[string]string{}, ""},
		{"debian", map[string]string{"/etc/sudoers": "Defaults\tenv_reset\nDefaults\tmail_badpass\n" +
			"Defaults\tsecure_path=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin\"\n@includedir /etc/sudoers.d\n"},
			"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin"},
		{"in a list, continued", map[string]string{"/etc/sudoers": "Defaults env_reset, \\\n  secure_path=/sbin:/bin, !lecture\n"}, "/sbin:/bin"},
		{"user defaults ignored", map[string]string{"/etc/sudoers": "Defaults secure_path=/a\nDefaults:alice secure_path=/b\nDefaults>root secure_path=/c\n"}, "/a"},
		{"comment ignored", map[string]string{"/etc/sudoers": "Defaults secure_path=/a\n# Defaults secure_path=/b\n"}, "/a"},
		{"unset later", map[string]string{"/etc/sudoers": "Defaults secure_path=/a\n#includedir /etc/sudoers.d\n", "/etc/sudoers.d/x": "Defaults !secure_path\n"}, ""},
		{"include file", map[string]string{"/etc/sudoers": "Defaults secure_path=/a\n#include /etc/sudoers.local\n", "/etc/sudoers.local": "Defaults secure_path=\"/b\"\n"}, "/b"},
		{"includedir order and skips", map[string]string{"/etc/sudoers": "#includedir /etc/sudoers.d\n",
			"/etc/sudoers.d/10": "Defaults secure_path=/ten\n", "/etc/sudoers.d/20": "Defaults secure_path=/twenty\n",
			"/etc/sudoers.d/30~": "Defaults secure_path=/backup\n", "/etc/sudoers.d/40.rpmsave": "Defaults secure_path=/saved\n"}, "/twenty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SecurePath(tree(t, tt.files))
			if err != nil || got != tt.want {
				t.Fatalf("SecurePath = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestRunningKubeletConfig(t *testing.T) {
	root := tree(t, map[string]string{
		"/proc/1/comm":          "systemd\n",
		"/proc/1/cmdline":       "/sbin/init\x00--config=/wrong\x00",
		"/proc/812/comm":        "kubelet\n",
		"/proc/812/cmdline":     "/usr/bin/kubelet\x00--kubeconfig=/etc/kubernetes/kubelet.conf\x00--config\x00/etc/k3s/kubelet.yaml\x00",
		"/proc/self":            "-> 1",
		"/etc/k3s/kubelet.yaml": "shutdownGracePeriod: 2m\n",
	})
	if got := RunningKubeletConfig(root); got != "/etc/k3s/kubelet.yaml" {
		t.Fatalf("got %q", got)
	}
	f := readKubelet(&Sources{Root: root})
	if f.ConfigPath != "/etc/k3s/kubelet.yaml" || f.ConfigFrom != "kubelet --config" || f.RequestedSec != 120 {
		t.Fatalf("%+v", f)
	}
	if f := readKubelet(&Sources{Root: root, KubeletConfig: "/x"}); f.ConfigFrom != "--kubelet-config" || f.Error == "" {
		t.Fatalf("%+v", f)
	}
	if f := readKubelet(&Sources{Root: t.TempDir()}); f.ConfigFrom != "default" || f.ConfigPath != DefaultKubeletConfig {
		t.Fatalf("%+v", f)
	}
	root = tree(t, map[string]string{"/proc/9/comm": "kubelet\n", "/proc/9/cmdline": "kubelet\x00--config=/var/lib/kubelet/config.yaml\x00"})
	if got := RunningKubeletConfig(root); got != "/var/lib/kubelet/config.yaml" {
		t.Fatalf("--config=: got %q", got)
	}
}
