package kube

// TEMPORARY stand-ins for the API being built on branch misc-hardening;
// deleted when it is merged.

import (
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

type UnreadableError struct {
	Path string
	Err  error
}

func (e *UnreadableError) Error() string { return "cannot read " + e.Path + ": " + e.Err.Error() }
func (e *UnreadableError) Unwrap() error { return e.Err }

type HostID struct{ MachineID, SystemUUID, BootID string }

func ReadHostID(root string) HostID {
	r := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(root, p))
		return strings.TrimSpace(string(b))
	}
	return HostID{MachineID: r("/etc/machine-id"), SystemUUID: r("/sys/class/dmi/id/product_uuid"), BootID: r("/proc/sys/kernel/random/boot_id")}
}

func SameMachine(n *corev1.Node, h HostID) (bool, string) {
	ni := n.Status.NodeInfo
	if ni.MachineID != "" && h.MachineID != "" && !strings.EqualFold(ni.MachineID, h.MachineID) {
		return false, "machine ID " + ni.MachineID + ", this machine's " + h.MachineID
	}
	return true, ""
}
