package install

import (
	"bufio"
	"bytes"
	"strings"
)

// Distribution families, from os-release's ID and ID_LIKE.
const (
	Debian  = "debian"  // dpkg: dpkg-divert, update-alternatives
	RPM     = "rpm"     // the RHEL family: alternatives, no diversions
	Unknown = "unknown" // neither
)

// Modes.
const (
	ModeSymlink      = "symlink"
	ModeAlternatives = "alternatives"
	ModeDivert       = "divert"
)

// distro reads /etc/os-release (else /usr/lib/os-release) of the target
// and returns the family and the ID it was decided from.
func distro(t target) (family, id string) {
	data, err := t.readFile("/etc/os-release")
	if err != nil {
		data, _ = t.readFile("/usr/lib/os-release")
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && !strings.HasPrefix(k, "#") {
			vars[k] = strings.Trim(v, `"'`)
		}
	}
	id = vars["ID"]
	for _, w := range append([]string{id}, strings.Fields(vars["ID_LIKE"])...) {
		switch w {
		case "debian", "ubuntu":
			return Debian, id
		case "rhel", "fedora", "centos", "rocky", "almalinux", "ol", "amzn":
			return RPM, id
		}
	}
	if id == "" {
		id = "none"
	}
	return Unknown, id
}

// DefaultMode is the mode for a family: divert where the package
// manager's own mechanism keeps the switch across package updates (a dpkg
// diversion; on RPM systems the originals are replaced and the package's
// trigger on systemd runs `gnsh install --mode divert` again), symlink
// elsewhere.
func DefaultMode(family string) string {
	if family == Debian || family == RPM {
		return ModeDivert
	}
	return ModeSymlink
}
