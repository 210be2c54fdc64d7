package nodefacts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fixes doctor gives name what the node has and how gnsh came onto
// it: never a make target or a path of gnsh's source tree.
func TestFixesForTheInstalledNode(t *testing.T) {
	pkg := InstallFacts{By: ByPackage, Unit: "/lib/systemd/system/gnsh.service", RBAC: PackageDocs + "/rbac.yaml", RBACDoc: PackageDocs + "/rbac.md"}
	role := InstallFacts{By: ByRole, Unit: "/etc/systemd/system/gnsh.service", Role: true}
	// The role with gnsh_install_from: package: its next run deletes a
	// hand-written /etc/gnsh/kubeconfig (gnsh_credentials: kubelet) and
	// sets the agent's enablement (gnsh_agent), so the fixes of those go
	// through the role; the unit is the package's.
	rolePkg := pkg
	rolePkg.Role = true
	for _, tt := range []struct {
		name    string
		install InstallFacts
		change  func(r *Report)
		check   func(r *Report) Check
		fix     string
	}{
		{"access, packaged", pkg, func(r *Report) {
			r.Access = &AccessFacts{User: "stranger", Denied: []Denial{{APIRequest: GnshRequests("node1", false)[0]}}}
		},
			// The drain's requests are the kubelet identity's (issue 22),
			// however gnsh was installed.
			CheckAccess, "drain with this node's kubelet kubeconfig, which may drain this node and no other"},
		{"access, the role's", role, func(r *Report) {
			r.Access = &AccessFacts{User: "stranger", Denied: []Denial{{APIRequest: GnshRequests("node1", false)[0]}}}
		},
			CheckAccess, "gnsh's rbac.yaml grants only the reboot-slot gate's requests"},
		{"gate refused, packaged", pkg, func(r *Report) { r.Slots = SlotsFacts{Gate: "required", Cause: CauseAccess, Error: "x"} },
			CheckSlots, "kubectl apply -f /usr/share/doc/gnsh/rbac.yaml (as a cluster admin)"},
		{"gate refused, the role's", role, func(r *Report) { r.Slots = SlotsFacts{Gate: "optional", Cause: CauseLease, Error: "x"} },
			CheckSlots, "give the Ansible role gnsh an admin kubeconfig (gnsh_kubectl_kubeconfig) and run it again: it applies rbac.yaml and gives each node its gate token in /etc/gnsh/kubeconfig; or set slots.gate: off in /etc/gnsh/config.yaml"},
		{"heartbeats refused, packaged", pkg, func(r *Report) { r.Slots.Degraded = "watch the kubelets' Leases" },
			CheckSlots, "apply the rbac.yaml of this gnsh, which grants them: kubectl apply -f /usr/share/doc/gnsh/rbac.yaml (as a cluster admin)"},
		{"heartbeats refused, the role's", role, func(r *Report) { r.Slots.Degraded = "watch the kubelets' Leases" },
			CheckSlots, "run the Ansible role gnsh again with gnsh_kubectl_kubeconfig (it applies the rbac.yaml of this gnsh)"},
		{"agent disabled by the role", role, func(r *Report) {
			r.Agent.ActiveState, r.Agent.UnitFileState, r.Agent.Lock, r.Agent.Running = "inactive", "disabled", LockAbsent, false
		}, CheckAgent, "if it should run: set gnsh_agent: true for the Ansible role gnsh and run it again"},
		{"agent disabled, the role's package", rolePkg, func(r *Report) {
			r.Agent.ActiveState, r.Agent.UnitFileState, r.Agent.Lock, r.Agent.Running = "inactive", "disabled", LockAbsent, false
		}, CheckAgent, "if it should run: set gnsh_agent: true for the Ansible role gnsh and run it again"},
		{"gate refused, the role's package", rolePkg, func(r *Report) { r.Slots = SlotsFacts{Gate: "optional", Cause: CauseLease, Error: "x"} },
			CheckSlots, "give the Ansible role gnsh an admin kubeconfig (gnsh_kubectl_kubeconfig) and run it again"},
		{"unit gone, the role's package", rolePkg, func(r *Report) {
			r.Agent.ActiveState, r.Agent.LoadState, r.Agent.Lock, r.Agent.Running = "inactive", "not-found", LockAbsent, false
		}, CheckAgent, "reinstall the gnsh package"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := healthy()
			r.Install = tt.install
			tt.change(r)
			if c := tt.check(r); !strings.Contains(c.Fix, tt.fix) {
				t.Errorf("fix %q\nlacks %q", c.Fix, tt.fix)
			}
		})
	}
	// No fix, on any node, names a make target or a file of the source tree.
	for _, in := range []InstallFacts{{}, pkg, role, {By: ByInstall}} {
		for _, f := range []string{in.unitFix(), in.enableFix("systemctl enable --now gnsh.service"), in.applyRBAC(), in.identityFix(), accessFix(in, "stranger")} {
			if strings.Contains(f, "make ") || strings.Contains(f, "install/kubernetes") || strings.Contains(f, "README.md") {
				t.Errorf("%+v: fix %q names the source tree", in, f)
			}
		}
	}
}

// readInstall tells the package, the Ansible role and gnsh install apart
// from the files they leave.
func TestReadInstall(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files map[string]string
		want  InstallFacts
	}{
		{"nothing", nil, InstallFacts{}},
		{"gnsh install", map[string]string{InstallRecord: `{"mode":"divert"}`, "/etc/systemd/system/gnsh.service": ""},
			InstallFacts{By: ByInstall, Unit: "/etc/systemd/system/gnsh.service"}},
		{"the .deb", map[string]string{InstallRecord: `{"packaged":true}`, "/lib/systemd/system/gnsh.service": "",
			PackageDocs + "/rbac.yaml": "", PackageDocs + "/rbac.md": "", "/var/lib/dpkg/info/gnsh.list": ""},
			InstallFacts{By: ByPackage, Unit: "/lib/systemd/system/gnsh.service", RBAC: PackageDocs + "/rbac.yaml", RBACDoc: PackageDocs + "/rbac.md"}},
		{"the .rpm", map[string]string{"/usr/lib/systemd/system/gnsh.service": "", PackageDocs + "/rbac.yaml": ""},
			InstallFacts{By: ByPackage, Unit: "/usr/lib/systemd/system/gnsh.service", RBAC: PackageDocs + "/rbac.yaml"}},
		{"the role", map[string]string{InstallRecord: `{"mode":"divert"}`, "/etc/systemd/system/gnsh.service": "",
			"/etc/gnsh/config.yaml": "# /etc/gnsh/config.yaml — managed by Ansible (role gnsh); every key is\ndrain: true\n"},
			InstallFacts{By: ByRole, Unit: "/etc/systemd/system/gnsh.service", Role: true}},
		// The role with gnsh_install_from: package: the package's files,
		// the role's config.
		{"the role, installing the .deb", map[string]string{"/var/lib/dpkg/info/gnsh.list": "", PackageDocs + "/rbac.yaml": "",
			"/lib/systemd/system/gnsh.service": "", "/etc/gnsh/config.yaml": "# /etc/gnsh/config.yaml — managed by Ansible (role gnsh); every key is\n"},
			InstallFacts{By: ByPackage, Unit: "/lib/systemd/system/gnsh.service", RBAC: PackageDocs + "/rbac.yaml", Role: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for p, body := range tt.files {
				full := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := &Sources{Root: root, Getenv: func(string) string { return "" }}
			if got := readInstall(s, s.configPath()); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
