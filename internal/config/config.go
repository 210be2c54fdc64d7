// Package config reads /etc/gnsh/config.yaml. Every key is optional and
// documented in the README; an unknown key is an error, so that a typo
// never silently changes what a reboot does.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gnsh/gnsh/internal/legacy"
)

// Path is where gnsh looks for its configuration; $GNSH_CONFIG overrides it.
const Path = "/etc/gnsh/config.yaml"

// Config is gnsh's policy. The zero value is not the default: use Default.
type Config struct {
	// Node is this node's name in the cluster; empty = from the kubelet's
	// client certificate or the host name.
	Node string `json:"node"`
	// Kubeconfig to use; empty = $KUBECONFIG, /etc/gnsh/kubeconfig, then
	// /etc/kubernetes/kubelet.conf.
	Kubeconfig string `json:"kubeconfig"`
	// Drain before shutdown, reboot, poweroff and halt (--no-drain = false).
	Drain bool `json:"drain"`
	// DrainTimeout bounds the drain (--drain-timeout). Scheduled shutdowns
	// due within it are drained at once; later ones by the node agent.
	DrainTimeout Duration `json:"drainTimeout"`
	// ForceDrain hands off even when the drain did not finish in time
	// (--force-drain). Off: a blocked drain refuses the shutdown.
	ForceDrain bool `json:"forceDrain"`
	// APITimeout bounds every API request; an API server that does not
	// answer in time is treated as down, and the shutdown proceeds.
	APITimeout Duration `json:"apiTimeout"`
	// UnreachableAfter is how long the API server may stop answering in the
	// middle of a drain before gnsh gives up the drain and hands off.
	UnreachableAfter Duration `json:"unreachableAfter"`
	// ForceCordonTimeout bounds the best-effort cordon of halt/poweroff/
	// reboot -f, which never drains.
	ForceCordonTimeout Duration `json:"forceCordonTimeout"`
	// PodGracePeriod, if set, overrides every pod's own grace period
	// (seconds; 0 kills at once). Unset: each pod's own.
	PodGracePeriod *int64 `json:"podGracePeriod"`
	// Events: post Kubernetes Events on the Node.
	Events bool `json:"events"`
	// Debug prints debug lines (such as "no kubeconfig: not a Kubernetes
	// node") on stderr.
	Debug bool `json:"debug"`
}

// Default returns the configuration used when the file or a key is absent.
func Default() Config {
	return Config{
		Drain:              true,
		DrainTimeout:       Duration(5 * time.Minute),
		APITimeout:         Duration(5 * time.Second),
		UnreachableAfter:   Duration(10 * time.Second),
		ForceCordonTimeout: Duration(3 * time.Second),
		Events:             true,
	}
}

// Duration is a positive duration written as "90s", "5m", "1h30m" or a
// number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalJSON accepts a string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := legacy.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the Go form ("5m0s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Load reads the file at path on top of the defaults. A missing file is
// not an error; an unreadable or invalid one is, naming the file.
func Load(path string) (Config, error) {
	c := Default()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	c, err = Parse(b)
	if err != nil {
		return c, fmt.Errorf("%s: %s", path, err)
	}
	return c, nil
}

// Parse reads a configuration on top of the defaults. On error it returns
// the defaults.
func Parse(b []byte) (Config, error) {
	c := Default()
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Default(), errors.New(tidy(err))
	}
	if c.PodGracePeriod != nil && *c.PodGracePeriod < 0 {
		return Default(), errors.New("podGracePeriod must be 0 or more seconds (leave it out for each pod's own)")
	}
	return c, nil
}

// tidy shortens sigs.k8s.io/yaml's errors to what an admin needs.
func tidy(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "error unmarshaling JSON: while decoding JSON: ")
	s = strings.TrimPrefix(s, "error converting YAML to JSON: ")
	s = strings.Replace(s, "json: unknown field", "unknown key", 1)
	// One line: "yaml: unmarshal errors:\n  line 3: …" lists each error
	// on its own indented line.
	s = strings.ReplaceAll(s, ":\n  ", ": ")
	return strings.ReplaceAll(s, "\n  ", "; ")
}
