package nodefacts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// DefaultKubeletConfig is where kubeadm writes kubelet's configuration.
const DefaultKubeletConfig = "/var/lib/kubelet/config.yaml"

// kubeletConfig is the part of KubeletConfiguration gnsh reads.
type kubeletConfig struct {
	ShutdownGracePeriod              string `json:"shutdownGracePeriod"`
	ShutdownGracePeriodCriticalPods  string `json:"shutdownGracePeriodCriticalPods"`
	ShutdownGracePeriodByPodPriority []struct {
		Priority                   int32 `json:"priority"`
		ShutdownGracePeriodSeconds int64 `json:"shutdownGracePeriodSeconds"`
	} `json:"shutdownGracePeriodByPodPriority"`
}

// kubeletConfigPath returns the kubelet config file to read and whence.
func kubeletConfigPath(s *Sources) (string, string) {
	if s.KubeletConfig != "" {
		return s.KubeletConfig, "--kubelet-config"
	}
	if p := RunningKubeletConfig(s.Root); p != "" {
		return p, "kubelet --config"
	}
	return DefaultKubeletConfig, "default"
}

// RunningKubeletConfig returns the --config argument of a running
// kubelet (a process whose comm is "kubelet"), read from /proc below
// root, or "".
func RunningKubeletConfig(root string) string {
	procs, _ := filepath.Glob(filepath.Join(root, "/proc/[0-9]*"))
	for _, dir := range procs {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, "--config="); ok && v != "" {
				return v
			}
			if a == "--config" && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

func readKubelet(s *Sources) KubeletFacts {
	p, from := kubeletConfigPath(s)
	f := KubeletFacts{ConfigPath: p, ConfigFrom: from}
	data, err := os.ReadFile(s.path(p))
	if err != nil {
		f.Error = err.Error()
		if os.IsNotExist(err) {
			f.Error = "no kubelet config file at " + p
		}
		return f
	}
	f2, err := ParseKubeletConfig(data)
	if err != nil {
		f.Error = fmt.Sprintf("%s: %v", p, err)
		return f
	}
	f2.ConfigPath, f2.ConfigFrom = p, from
	return f2
}

// ParseKubeletConfig reads the shutdown settings of a KubeletConfiguration.
func ParseKubeletConfig(data []byte) (KubeletFacts, error) {
	var c kubeletConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		return KubeletFacts{}, err
	}
	f := KubeletFacts{ShutdownGracePeriod: c.ShutdownGracePeriod, ShutdownGracePeriodCriticalPods: c.ShutdownGracePeriodCriticalPods}
	var grace time.Duration
	for _, v := range []struct {
		name, s string
		d       *time.Duration
	}{
		{"shutdownGracePeriod", c.ShutdownGracePeriod, &grace},
		{"shutdownGracePeriodCriticalPods", c.ShutdownGracePeriodCriticalPods, new(time.Duration)},
	} {
		if v.s == "" {
			continue
		}
		d, err := time.ParseDuration(v.s)
		if err != nil {
			return KubeletFacts{}, fmt.Errorf("%s: %v", v.name, err)
		}
		*v.d = d
	}
	for _, p := range c.ShutdownGracePeriodByPodPriority {
		f.ByPodPrioritySec += p.ShutdownGracePeriodSeconds
	}
	if f.ByPodPrioritySec > 0 {
		f.RequestedSec = float64(f.ByPodPrioritySec)
	} else {
		f.RequestedSec = grace.Seconds()
	}
	return f, nil
}
