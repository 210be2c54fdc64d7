package nodefacts

import (
	"encoding/json"
	"io"
	"os"
	"strings"
)

// Where gnsh's ways of installing leave their marks on a node.
// internal/install, which imports this package, checks that InstallRecord
// is the record it writes.
const (
	// InstallRecord is gnsh install's record (also written by the
	// packages' scripts, which run gnsh install --packaged).
	InstallRecord = "/var/lib/gnsh/install.json"
	// PackageDocs is where the .deb and the .rpm put rbac.yaml and rbac.md.
	PackageDocs = "/usr/share/doc/gnsh"
	// dpkgList is dpkg's list of the gnsh package's files.
	dpkgList = "/var/lib/dpkg/info/gnsh.list"
	// roleMark opens the config file the Ansible role writes.
	roleMark = "managed by Ansible (role gnsh)"
)

// How gnsh came onto a node (InstallFacts.By).
const (
	ByPackage = "package"      // the .deb or the .rpm
	ByRole    = "role"         // the Ansible role gnsh
	ByInstall = "gnsh install" // gnsh install, by hand
)

// unitPaths are where gnsh.service may be, in systemd's order.
var unitPaths = []string{"/etc/systemd/system/", "/run/systemd/system/", "/usr/lib/systemd/system/", "/lib/systemd/system/"}

// InstallFacts is how gnsh was installed on this node, as its files tell:
// it decides the fixes gnsh doctor gives, so that none names a step of
// another way of installing (or of building gnsh from its sources). Not
// part of gnsh status's JSON.
type InstallFacts struct {
	// By is ByPackage (the package's files or dpkg's list, or a record
	// made with --packaged), ByRole (the config file the Ansible role
	// writes), ByInstall (gnsh install's record) or "" (unknown).
	By string
	// Unit is the gnsh.service file found, "" if none.
	Unit string
	// RBAC is the rbac.yaml on this node (the package's), "" if none.
	RBAC string
	// RBACDoc is the page on this node saying how to make
	// /etc/gnsh/kubeconfig from rbac.yaml's ServiceAccount, "" if none.
	RBACDoc string
	// Role: the Ansible role gnsh writes the config file, whatever put
	// the binary there (the role installs the package too, with
	// gnsh_install_from: package). What the role sets (the agent's
	// enablement, /etc/gnsh/kubeconfig) is then fixed through the role:
	// its next run undoes a fix made by hand.
	Role bool
}

// byRole reports whether the Ansible role manages this node's gnsh.
func (f InstallFacts) byRole() bool { return f.By == ByRole || f.Role }

// readInstall reads how gnsh was installed; configPath is gnsh's config
// file.
func readInstall(s *Sources, configPath string) InstallFacts {
	var f InstallFacts
	exists := func(p string) bool { _, err := os.Lstat(s.path(p)); return err == nil }
	for _, d := range unitPaths {
		if exists(d + AgentUnit) {
			f.Unit = d + AgentUnit
			break
		}
	}
	if exists(PackageDocs + "/rbac.yaml") {
		f.RBAC = PackageDocs + "/rbac.yaml"
	}
	if exists(PackageDocs + "/rbac.md") {
		f.RBACDoc = PackageDocs + "/rbac.md"
	}
	var rec struct {
		Packaged bool `json:"packaged"`
	}
	recorded := false
	if b, err := os.ReadFile(s.path(InstallRecord)); err == nil {
		recorded = json.Unmarshal(b, &rec) == nil
	}
	f.Role = fileStarts(configPath, roleMark)
	switch {
	case exists(dpkgList) || f.RBAC != "" || rec.Packaged:
		f.By = ByPackage
	case f.Role:
		f.By = ByRole
	case recorded:
		f.By = ByInstall
	}
	return f
}

// fileStarts reports whether the first lines of the file at path hold
// mark.
func fileStarts(path, mark string) bool {
	fh, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fh.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(fh, head)
	return strings.Contains(string(head[:n]), mark)
}

// unitFix says how to put gnsh.service back on a node that lacks it.
func (f InstallFacts) unitFix() string {
	switch f.By {
	case ByPackage:
		return "reinstall the gnsh package, which ships " + AgentUnit + " (apt-get install --reinstall gnsh, or dnf reinstall gnsh), then systemctl enable --now " + AgentUnit
	case ByRole:
		return "run the Ansible role gnsh again with gnsh_agent: true: it installs, enables and starts " + AgentUnit
	case ByInstall:
		return "run gnsh install again: it writes /etc/systemd/system/" + AgentUnit + " (and enables it on a first install), then systemctl enable --now " + AgentUnit
	}
	return "install " + AgentUnit + " as gnsh was installed (gnsh install writes it; the gnsh package and the Ansible role ship it), then systemctl enable --now " + AgentUnit
}

// enableFix says how to turn the agent on for good: with the Ansible role,
// through the role (its next run would undo a systemctl enable).
func (f InstallFacts) enableFix(enable string) string {
	if f.byRole() {
		return "set gnsh_agent: true for the Ansible role gnsh and run it again (a hand-made " + enable + " lasts until its next run)"
	}
	return enable
}

// applyRBAC is the command that applies gnsh's RBAC objects: the package's
// rbac.yaml on this node, else the one of gnsh's release.
func (f InstallFacts) applyRBAC() string {
	if f.RBAC != "" {
		return "kubectl apply -f " + f.RBAC + " (as a cluster admin)"
	}
	return "kubectl apply -f rbac.yaml (from gnsh's release tarball, as a cluster admin)"
}

// identityFix says how to give gnsh its own identity: rbac.yaml's
// ServiceAccount, as /etc/gnsh/kubeconfig.
func (f InstallFacts) identityFix() string {
	if f.byRole() {
		return "give the Ansible role gnsh an admin kubeconfig (gnsh_kubectl_kubeconfig) and run it again: it applies rbac.yaml and gives each node its gate token in /etc/gnsh/kubeconfig"
	}
	how := ""
	if f.RBACDoc != "" {
		how = " (how: " + f.RBACDoc + ")"
	}
	return f.applyRBAC() + ", then write a kubeconfig for its ServiceAccount kube-system/gnsh to /etc/gnsh/kubeconfig, mode 0600" + how
}
