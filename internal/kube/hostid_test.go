package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReadHostID(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "etc/machine-id"), "0123456789abcdef0123456789abcdef\n")
	write(t, filepath.Join(root, "proc/sys/kernel/random/boot_id"), "5f1c0bb1-6d9e-4a0e-9d4c-0c7d2a8f9e11\n")
	// No DMI: product_uuid absent.
	want := HostID{MachineID: "0123456789abcdef0123456789abcdef", BootID: "5f1c0bb1-6d9e-4a0e-9d4c-0c7d2a8f9e11"}
	if got := ReadHostID(root); got != want {
		t.Errorf("ReadHostID = %+v, want %+v", got, want)
	}
	write(t, filepath.Join(root, "sys/class/dmi/id/product_uuid"), "EC2A1B2C-0000-1111-2222-333344445555\n")
	want.SystemUUID = "EC2A1B2C-0000-1111-2222-333344445555"
	if got := ReadHostID(root + "/"); got != want {
		t.Errorf("ReadHostID = %+v, want %+v", got, want)
	}
	if got := ReadHostID(filepath.Join(root, "nothing")); got != (HostID{}) {
		t.Errorf("empty root: %+v", got)
	}
	// The real host: whatever is there, without error.
	h := ReadHostID("")
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil && h.BootID != strings.TrimSpace(string(b)) {
		t.Errorf("host boot ID %q", h.BootID)
	}
}

func TestSameMachine(t *testing.T) {
	const (
		mid   = "0123456789abcdef0123456789abcdef"
		mid2  = "fedcba9876543210fedcba9876543210"
		uuid  = "ec2a1b2c-0000-1111-2222-333344445555"
		uuidU = "EC2A1B2C-0000-1111-2222-333344445555"
		uuid2 = "4c4c4544-0042-3510-8052-b4c04f4e3132"
		boot  = "5f1c0bb1-6d9e-4a0e-9d4c-0c7d2a8f9e11"
		boot2 = "a0a0a0a0-1111-2222-3333-444444444444"
	)
	node := func(m, s, b string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{MachineID: m, SystemUUID: s, BootID: b}}}
	}
	for _, tt := range []struct {
		name    string
		node    *corev1.Node
		host    HostID
		same    bool
		whyHas  []string
		whyNot  []string
		unknown bool // why says it could not be confirmed
	}{
		{"all equal", node(mid, uuid, boot), HostID{mid, uuid, boot}, true,
			[]string{"machine ID " + mid, "system UUID " + uuid, "boot ID " + boot}, []string{"but"}, false},
		{"machine ID equal only", node(mid, "", ""), HostID{mid, uuid, boot}, true, []string{"machine ID " + mid}, nil, false},
		{"system UUID equal, case differs", node("", uuidU, ""), HostID{"", uuid, ""}, true, []string{"system UUID"}, nil, false},
		{"boot ID equal, another boot's machine ID unknown", node("", "", boot), HostID{mid, "", boot}, true, []string{"boot ID"}, nil, false},
		{"new boot: boot ID differs, machine ID equal", node(mid, "", boot2), HostID{mid, "", boot}, true,
			[]string{"machine ID " + mid, "but boot ID: Node node1 reports " + boot2 + ", this machine has " + boot}, nil, false},
		{"machine ID differs", node(mid2, "", ""), HostID{mid, uuid, boot}, false,
			[]string{"another machine", "machine ID: Node node1 reports " + mid2 + ", this machine has " + mid}, nil, false},
		{"system UUID differs", node("", uuid2, boot), HostID{mid, uuid, boot2}, false,
			[]string{"system UUID: Node node1 reports " + uuid2 + ", this machine has " + uuid}, []string{"boot ID"}, false},
		{"both differ", node(mid2, uuid2, boot2), HostID{mid, uuid, boot}, false, []string{"machine ID:", "system UUID:"}, nil, false},
		// A cloned image shares /etc/machine-id: one equal ID is taken as
		// proof, and the difference is still told.
		{"machine ID equal, system UUID differs", node(mid, uuid2, ""), HostID{mid, uuid, ""}, true,
			[]string{"machine ID " + mid, "but system UUID: Node node1 reports " + uuid2}, nil, false},
		{"only boot ID known, differs", node("", "", boot2), HostID{mid, "", boot}, true,
			[]string{"boot ID: Node node1 reports " + boot2, "may not have reported since this boot"}, nil, true},
		{"nothing reported (kwok)", node("", "", ""), HostID{mid, uuid, boot}, true, []string{"no ID known on both sides"}, nil, true},
		{"nothing read here", node(mid, uuid, boot), HostID{}, true, []string{"no ID known on both sides"}, nil, true},
		{"whitespace is not an ID", node(" ", "\n", ""), HostID{" ", " ", ""}, true, nil, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			same, why := SameMachine(tt.node, tt.host)
			if same != tt.same {
				t.Errorf("same = %v, want %v (%s)", same, tt.same, why)
			}
			for _, s := range tt.whyHas {
				if !strings.Contains(why, s) {
					t.Errorf("why %q lacks %q", why, s)
				}
			}
			for _, s := range tt.whyNot {
				if strings.Contains(why, s) {
					t.Errorf("why %q has %q", why, s)
				}
			}
			if unknown := strings.HasPrefix(why, "could not confirm"); unknown != tt.unknown {
				t.Errorf("why %q: unconfirmed = %v, want %v", why, unknown, tt.unknown)
			}
		})
	}
}
