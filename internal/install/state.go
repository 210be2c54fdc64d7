package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
)

// StatePath records what `gnsh install` did, for `gnsh uninstall` and for
// a later install in another mode.
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
}

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
}

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

func writeState(t target, s *State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return t.writeFile(StatePath, append(data, '\n'), 0o644)
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
