// Package install holds the files gnsh installs, embedded from this
// directory so that the repository files stay their single source:
// systemd/gnsh.service (the node agent's unit) and gnsh/config.yaml (the
// annotated example configuration), and the man pages' Markdown sources
// (man/*.md). `gnsh install` (internal/install) writes them.
package install

import (
	"bytes"
	"embed"
	"io/fs"
	"path"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
)

//go:embed man/*.md
var manSources embed.FS

//go:embed systemd/gnsh.service
var unit []byte

//go:embed gnsh/config.yaml
var config []byte

// Unit is install/systemd/gnsh.service.
func Unit() []byte { return unit }

// Config is install/gnsh/config.yaml.
func Config() []byte { return config }

// ManPages renders the man pages from their Markdown sources embedded
// from man/NAME.SECTION.md (gnsh.8, gnsh-shutdown.8, gnsh-config.5) with
// go-md2man, version in their title lines: NAME.SECTION → roff. `gnsh
// install` writes them to /usr/local/share/man/manSECTION/; `make man`
// (install/man/gen) and the packages render the same sources.
func ManPages(version string) (map[string][]byte, error) {
	srcs, err := fs.Glob(manSources, "man/*.md")
	if err != nil {
		return nil, err
	}
	pages := make(map[string][]byte, len(srcs))
	for _, src := range srcs {
		name := strings.TrimSuffix(path.Base(src), ".md")
		md, err := manSources.ReadFile(src)
		if err != nil {
			return nil, err
		}
		pages[name] = RenderMan(md, version)
	}
	return pages, nil
}

// RenderMan turns one Markdown page into roff, @VERSION@ in its title
// line replaced by version.
func RenderMan(md []byte, version string) []byte {
	md = bytes.ReplaceAll(md, []byte("@VERSION@"), []byte(version))
	return md2man.Render(md)
}
