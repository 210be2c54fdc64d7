// Package version says which gnsh this is: the release version, the commit
// it was built from, the commit's date and the Go toolchain.
//
// Version comes from the VERSION file at the top of the repository (set
// with -ldflags "-X github.com/gnsh/gnsh/internal/version.Version=…" by
// make build, make package and make release). Commit and Date are read from
// the build information the go command stamps into every binary built in a
// git checkout (-buildvcs), unless -ldflags set them; the date is the
// commit's, not the build's, so that two builds of one commit are the same.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at build time; see the package comment.
var (
	Version = "dev"
	Commit  = ""
	Date    = ""
)

// Info is what `gnsh version` prints.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`          // short hash; "" when unknown
	Dirty   bool   `json:"dirty,omitempty"` // built from a tree with uncommitted changes
	Date    string `json:"date"`            // the commit's date, YYYY-MM-DD; "" when unknown
	Go      string `json:"go"`              // go1.26.8
	OSArch  string `json:"platform"`        // linux/amd64
}

// Get returns the version information of this binary.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, Date: Date, Go: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.time":
				if i.Date == "" {
					i.Date, _, _ = strings.Cut(s.Value, "T")
				}
			case "vcs.modified":
				i.Dirty = s.Value == "true"
			}
		}
	}
	if len(i.Commit) > 12 {
		i.Commit = i.Commit[:12]
	}
	return i
}

// String is one line: "gnsh 0.1.0 (commit 1a2b3c4d5e6f, 2026-11-27, go1.26.8 linux/amd64)".
func (i Info) String() string {
	var parts []string
	if i.Commit != "" {
		c := "commit " + i.Commit
		if i.Dirty {
			c += "-dirty"
		}
		parts = append(parts, c)
	}
	if i.Date != "" {
		parts = append(parts, i.Date)
	}
	parts = append(parts, i.Go+" "+i.OSArch)
	return fmt.Sprintf("gnsh %s (%s)", i.Version, strings.Join(parts, ", "))
}
