// Command gen renders gnsh's man pages from their Markdown sources
// (install/man/*.md) with go-md2man: `go run ./install/man/gen -version V
// -out DIR install/man/*.md` writes DIR/gnsh.8 and so on (`make man`).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
)

func main() {
	version := flag.String("version", "dev", "gnsh version for the pages' header")
	out := flag.String("out", "bin/man", "output directory")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: gen [-version V] [-out DIR] PAGE.N.md...")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, src := range flag.Args() {
		name, err := pageName(src)
		if err == nil {
			var b []byte
			if b, err = os.ReadFile(src); err == nil {
				err = os.WriteFile(filepath.Join(*out, name), render(b, *version), 0o644)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}

// pageName maps gnsh.8.md to gnsh.8.
func pageName(src string) (string, error) {
	base := filepath.Base(src)
	name := strings.TrimSuffix(base, ".md")
	if name == base || filepath.Ext(name) == "" || len(filepath.Ext(name)) != 2 {
		return "", fmt.Errorf("%s: want NAME.SECTION.md", src)
	}
	return name, nil
}

// render turns one Markdown page into roff, @VERSION@ in its title line
// replaced by version.
func render(md []byte, version string) []byte {
	md = bytes.ReplaceAll(md, []byte("@VERSION@"), []byte(version))
	return md2man.Render(md)
}
