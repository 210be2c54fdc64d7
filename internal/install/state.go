package install

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/gnsh/gnsh/internal/nodefacts"
)

// StatePath records what `gnsh install` did, for `gnsh uninstall` and for
// a later install in another mode. What a step may change is recorded
// before the step makes it, and what it undoes is forgotten after: the
// record always covers the tree, so that a run interrupted anywhere (a
// kill, a power loss) is finished or undone by the next one, which reads
// the rest from the tree (dpkg's diversions, the alternatives, the kept
// originals, what the files hold).
const StatePath = "/var/lib/gnsh/install.json"

// StatePrev is the state file as a run found it (another name of the same
// file) while the run writes StatePath: a failed run renames it back.
const StatePrev = StatePath + ".gnsh-prev"

// State is the content of StatePath.
type State struct {
	Version  int    `json:"version"`
	Mode     string `json:"mode,omitempty"` // how the commands are switched; "" none
	Family   string `json:"family"`         // debian, rpm or unknown
	Packaged bool   `json:"packaged"`
	// Bin is the gnsh the commands point at.
	Bin      string    `json:"bin,omitempty"`
	Commands []Command `json:"commands,omitempty"`
	Files    []File    `json:"files,omitempty"`
	// Links are the unit's enablement links install made.
	Links []string `json:"links,omitempty"`
	// Dirs are the directories install made, outermost first; uninstall
	// removes those left empty.
	Dirs []string `json:"dirs,omitempty"`
	// Agent is what install does to the node agent's enablement:
	// AgentEnable on a first install (recorded before its first change,
	// so that an interrupted one is finished) and from the start of an
	// uninstall (an install after an interrupted one is a first one);
	// AgentKept afterwards and in older records (""): enabled, disabled
	// or masked, the agent stays as it is.
	Agent string `json:"agent,omitempty"`
}

// Values of State.Agent.
const (
	AgentEnable = "enable"
	AgentKept   = "kept"
)

// Command is one legacy command switched to gnsh.
type Command struct {
	Name string `json:"name"`
	// Path is the path switched: a link to Bin (symlink, divert) or the
	// alternatives link.
	Path string `json:"path"`
	// Saved is where the original is kept ("" when Path did not exist).
	Saved string `json:"saved,omitempty"`
	// Diverted: a dpkg diversion of Path to Saved, by package gnsh.
	Diverted bool `json:"diverted,omitempty"`
	// Alternatives: the alternatives group Name holds Bin and Saved.
	Alternatives bool `json:"alternatives,omitempty"`
}

// File is a file install wrote.
type File struct {
	Path string `json:"path"`
	// Saved is where the file found at Path before is kept ("" none).
	Saved string `json:"saved,omitempty"`
	// Keep: left in place by uninstall when its content is not Orig's
	// (the configuration, once edited).
	Keep bool `json:"keep,omitempty"`
	// Sum is the SHA-256 of what install writes at Path: where Saved is
	// missing, it tells gnsh's file from the original an interrupted run
	// left in place ("" in older records: taken for gnsh's).
	Sum string `json:"sha256,omitempty"`
}

func sum(data []byte) string { return fmt.Sprintf("%x", sha256.Sum256(data)) }

// wrote says whether data may be what install wrote at f.Path.
func (f File) wrote(data []byte) bool { return f.Sum == "" || (data != nil && f.Sum == sum(data)) }

func readState(t target) (*State, error) {
	data, err := t.readFile(StatePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &State{}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("%s: %v", StatePath, err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, this gnsh knows 1", StatePath, s.Version)
	}
	return s, nil
}

// writeState writes s with its lists in one order (the commands as
// nodefacts lists them, the rest by path: directories outermost first),
// so that the same installation is always the same file; mode 0600 (only
// gnsh install and uninstall, as root, read it).
func writeState(t target, s *State) error {
	c := *s
	c.Commands = append([]Command(nil), s.Commands...)
	order := map[string]int{}
	for i, n := range nodefacts.LegacyCommands {
		order[n] = i
	}
	sort.SliceStable(c.Commands, func(i, j int) bool { return order[c.Commands[i].Name] < order[c.Commands[j].Name] })
	c.Files = append([]File(nil), s.Files...)
	sort.SliceStable(c.Files, func(i, j int) bool { return c.Files[i].Path < c.Files[j].Path })
	c.Links = append([]string(nil), s.Links...)
	sort.Strings(c.Links)
	c.Dirs = append([]string(nil), s.Dirs...)
	sort.Strings(c.Dirs)
	data, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return err
	}
	return t.writeFile(StatePath, append(data, '\n'), 0o600)
}

func (s *State) file(p string) *File {
	for i := range s.Files {
		if s.Files[i].Path == p {
			return &s.Files[i]
		}
	}
	return nil
}

func (s *State) command(name string) *Command {
	for i := range s.Commands {
		if s.Commands[i].Name == name {
			return &s.Commands[i]
		}
	}
	return nil
}

func (s *State) hasDir(d string) bool {
	for _, x := range s.Dirs {
		if x == d {
			return true
		}
	}
	return false
}
