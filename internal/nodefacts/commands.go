package nodefacts

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// LegacyCommands are the four commands gnsh is installed over, in the
// order status shows them.
var LegacyCommands = []string{"reboot", "shutdown", "poweroff", "halt"}

// DefaultRootPath is systemd's default PATH (and Debian's root login
// PATH), used when $PATH is unset.
const DefaultRootPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// AnsibleShutdownPath is where ansible.builtin.reboot looks for shutdown
// (its find module, first match wins): a link in /usr/local/sbin is never
// used while /sbin/shutdown exists.
const AnsibleShutdownPath = "/sbin:/bin:/usr/sbin:/usr/bin:/usr/local/sbin"

// Sudoers is sudo's main policy file.
const Sudoers = "/etc/sudoers"

func (s *Sources) self() string {
	if s.Self != "" {
		return s.Self
	}
	if p, err := os.Readlink("/proc/self/exe"); err == nil {
		return p
	}
	return ""
}

func resolveCommands(s *Sources) CommandFacts {
	f := CommandFacts{Self: s.self(), RootPath: DefaultRootPath, RootPathFrom: "default"}
	euid := os.Geteuid
	if s.Euid != nil {
		euid = s.Euid
	}
	if p := s.getenv("PATH"); p != "" && euid() == 0 && s.getenv("SUDO_USER") == "" {
		f.RootPath, f.RootPathFrom = p, "$PATH"
	}
	sp, err := SecurePath(s.Root)
	f.SecurePath = sp
	if err != nil {
		f.SudoersErr = err.Error()
	}
	for _, n := range LegacyCommands {
		f.Root = append(f.Root, resolve(s.Root, f.Self, f.RootPath, n))
		if sp != "" {
			f.Sudo = append(f.Sudo, resolve(s.Root, f.Self, sp, n))
		}
	}
	f.Ansible = resolve(s.Root, f.Self, AnsibleShutdownPath, "shutdown")
	return f
}

// resolve looks name up in path (as execvp: the first executable
// regular file) below root and says what it is.
func resolve(root, self, path, name string) Resolution {
	r := Resolution{Name: name, Is: "missing"}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		target, err := ResolveIn(root, p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
				r.Error = err.Error()
			}
			continue
		}
		fi, err := os.Stat(filepath.Join(root, target))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		r.Path, r.Target, r.Error = p, target, ""
		r.Is = classify(root, self, target, fi)
		return r
	}
	return r
}

func classify(root, self, target string, fi fs.FileInfo) string {
	if self != "" {
		if sfi, err := os.Stat(self); err == nil && os.SameFile(fi, sfi) {
			return "gnsh"
		}
	}
	switch filepath.Base(target) {
	case "systemctl":
		return "systemctl"
	case "gnsh":
		// A gnsh binary, but not this one (another version?).
		return "gnsh"
	}
	return "other"
}

// ResolveIn resolves every symbolic link of the absolute path p as if
// root were "/": an absolute link target starts again at root. It returns
// the resolved path (without root).
func ResolveIn(root, p string) (string, error) {
	todo := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		full := filepath.Join(root, next)
		fi, err := os.Lstat(full)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		t, err := os.Readlink(full)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(t) {
			cur = "/"
		}
		todo = append(strings.Split(strings.TrimPrefix(t, "/"), "/"), todo...)
	}
	return cur, nil
}

var securePathRE = regexp.MustCompile(`(^|[\s,])(!?)secure_path\s*(=\s*("([^"]*)"|[^,\s]+))?`)

// SecurePath returns the secure_path of sudo's generic Defaults, read
// from /etc/sudoers and the files it includes (#include, @include,
// #includedir, @includedir; in an included directory, names with a dot
// or ending in ~ are skipped, as sudo does), the last setting winning.
// "" means none: sudo then keeps the caller's PATH.
func SecurePath(root string) (string, error) {
	var sp string
	seen := map[string]bool{}
	var readFile func(p string, depth int) error
	readFile = func(p string, depth int) error {
		if depth > 8 || seen[p] {
			return nil
		}
		seen[p] = true
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return err
		}
		var errs []error
		sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(string(data), "\\\n", " ")))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if d, ok := includeDirective(line, "includedir"); ok {
				if !filepath.IsAbs(d) {
					d = filepath.Join(filepath.Dir(p), d)
				}
				ents, err := os.ReadDir(filepath.Join(root, d))
				if err != nil {
					if !errors.Is(err, fs.ErrNotExist) {
						errs = append(errs, err)
					}
					continue
				}
				var names []string
				for _, e := range ents {
					n := e.Name()
					if strings.Contains(n, ".") || strings.HasSuffix(n, "~") || e.IsDir() {
						continue
					}
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					if err := readFile(filepath.Join(d, n), depth+1); err != nil {
						errs = append(errs, err)
					}
				}
				continue
			}
			if f, ok := includeDirective(line, "include"); ok {
				if !filepath.IsAbs(f) {
					f = filepath.Join(filepath.Dir(p), f)
				}
				if err := readFile(f, depth+1); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
				continue
			}
			if strings.HasPrefix(line, "#") {
				continue
			}
			rest, ok := strings.CutPrefix(line, "Defaults")
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
				continue // not generic Defaults (Defaults:user, Defaults>runas, …)
			}
			for _, m := range securePathRE.FindAllStringSubmatch(rest, -1) {
				switch {
				case m[2] == "!":
					sp = ""
				case m[5] != "":
					sp = m[5]
				case m[4] != "":
					sp = strings.Trim(m[4], `"`)
				}
			}
		}
		return errors.Join(errs...)
	}
	err := readFile(Sudoers, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return sp, err
}

// includeDirective parses "#include X" / "@include X" (word "include") or
// "#includedir D" / "@includedir D" (word "includedir").
func includeDirective(line, word string) (string, bool) {
	for _, p := range []string{"#", "@"} {
		if rest, ok := strings.CutPrefix(line, p+word); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`), true
		}
	}
	return "", false
}
