package kube

import (
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// HostID identifies this machine the way a kubelet reports its Node in
// status.nodeInfo. An empty field is unknown.
type HostID struct {
	MachineID  string // /etc/machine-id
	SystemUUID string // /sys/class/dmi/id/product_uuid (root only; absent without DMI)
	BootID     string // /proc/sys/kernel/random/boot_id, new on every boot
}

// ReadHostID reads this machine's identifiers below root ("" or "/" for
// the real host; a directory in tests). A file that is missing or cannot
// be read leaves its field empty.
func ReadHostID(root string) HostID {
	read := func(p string) string {
		b, err := os.ReadFile(strings.TrimSuffix(root, "/") + p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	return HostID{
		MachineID:  read("/etc/machine-id"),
		SystemUUID: read("/sys/class/dmi/id/product_uuid"),
		BootID:     read("/proc/sys/kernel/random/boot_id"),
	}
}

// SameMachine reports whether Node n is this machine, from the IDs its
// kubelet reported: root's $KUBECONFIG may point at another cluster in
// which some other machine's Node has this host's name.
//
// An ID that is empty on either side is unknown, never a mismatch (kwok and
// test clusters report none). Any known ID that is equal makes the answer
// yes. Otherwise a known machine ID or system UUID that differs makes it
// no. A boot ID that differs proves nothing by itself: the kubelet may not
// have posted its status since this boot. With nothing to go on the answer
// is yes, and why says it could not be confirmed. UUIDs are compared
// without regard to case (DMI tables and kubelets differ).
func SameMachine(n *corev1.Node, h HostID) (same bool, why string) {
	info := n.Status.NodeInfo
	ids := []struct {
		name       string
		node, host string
		proof      bool // does a difference prove another machine?
	}{
		{"machine ID", info.MachineID, h.MachineID, true},
		{"system UUID", info.SystemUUID, h.SystemUUID, true},
		{"boot ID", info.BootID, h.BootID, false},
	}
	var equal, differ, unproven []string
	for _, id := range ids {
		node, host := strings.TrimSpace(id.node), strings.TrimSpace(id.host)
		switch {
		case node == "" || host == "":
		case strings.EqualFold(node, host):
			equal = append(equal, fmt.Sprintf("%s %s", id.name, host))
		case id.proof:
			differ = append(differ, fmt.Sprintf("%s: Node %s reports %s, this machine has %s", id.name, n.Name, node, host))
		default:
			unproven = append(unproven, fmt.Sprintf("%s: Node %s reports %s, this machine has %s", id.name, n.Name, node, host))
		}
	}
	switch {
	case len(equal) > 0:
		why = fmt.Sprintf("Node %s has this machine's %s", n.Name, strings.Join(equal, " and "))
		if d := slices.Concat(differ, unproven); len(d) > 0 {
			why += "; but " + strings.Join(d, "; ")
		}
		return true, why
	case len(differ) > 0:
		return false, "Node " + n.Name + " is another machine: " + strings.Join(differ, "; ")
	case len(unproven) > 0:
		return true, fmt.Sprintf("could not confirm that Node %s is this machine (%s; the kubelet may not have reported since this boot)",
			n.Name, strings.Join(unproven, "; "))
	}
	return true, fmt.Sprintf("could not confirm that Node %s is this machine: no ID known on both sides", n.Name)
}

// OtherMachineError is a Node that is not this machine.
type OtherMachineError struct{ Node, Why string }

func (e *OtherMachineError) Error() string {
	return fmt.Sprintf("the Node %s in the cluster is not this machine (%s)", e.Node, e.Why)
}

// Check is SameMachine as an error: *OtherMachineError when n is another
// machine. It is the check every write gnsh makes to a Node goes through
// (drain.Check).
func (h HostID) Check(n *corev1.Node) error {
	if same, why := SameMachine(n, h); !same {
		return &OtherMachineError{Node: n.Name, Why: why}
	}
	return nil
}
