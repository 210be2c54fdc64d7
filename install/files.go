// Package install holds the files gnsh installs, embedded from this
// directory so that the repository files stay their single source:
// systemd/gnsh.service (the node agent's unit) and gnsh/config.yaml (the
// annotated example configuration). `gnsh install` (internal/install)
// writes them.
package install

import (
	_ "embed"
	"io/fs"
)

//go:embed systemd/gnsh.service
var unit []byte

//go:embed gnsh/config.yaml
var config []byte

// Unit is install/systemd/gnsh.service.
func Unit() []byte { return unit }

// Config is install/gnsh/config.yaml.
func Config() []byte { return config }

// Man holds manual pages to install, as NAME.SECTION files at its top
// level (gnsh.8, …), or nil when gnsh was built without them. The hook for
// the man pages: a file beside this one that embeds them sets it, e.g.
//
//	//go:embed man/*.8
//	var man embed.FS
//	func init() { Man = man }
//
// and `gnsh install` then writes each one to
// /usr/local/share/man/manSECTION/ (and `gnsh uninstall` removes it).
var Man fs.FS
