package drainer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/slots"
)

// A refusal the etcd quorum guard held back names --force-quorum; one the
// other limits held back does not.
func TestNoSlotNamesForceQuorum(t *testing.T) {
	r := newRun(newDrainer(t, nil, "").Drainer, forShutdown, "reboot")
	quorum := &slots.WaitError{Waited: time.Minute, Blocks: []slots.Block{{Limit: slots.LimitQuorum, Max: 3,
		Out: []slots.Out{{Node: "etcd-cp-2", Why: "not Ready"}}}}}
	if msg := r.tell(noSlot, verdict{}, quorum); !strings.Contains(msg, "or override the etcd quorum guard with --force-quorum") {
		t.Errorf("%q", msg)
	}
	cluster := &slots.WaitError{Waited: time.Minute, Blocks: []slots.Block{{Limit: slots.LimitCluster, Max: 1,
		Out: []slots.Out{{Node: "node2", Why: "NotReady"}}}}}
	if msg := r.tell(noSlot, verdict{}, cluster); strings.Contains(msg, "force-quorum") {
		t.Errorf("%q", msg)
	}
}

// No message a node shows names a path of gnsh's repository or a make
// target: a node has neither (issue 19). rbac.yaml is named as a node or
// an admin has it; the agent is started with its unit's name, and the
// Ansible role's way named beside it.
func TestMessagesNameNoRepositoryPath(t *testing.T) {
	files, err := filepath.Glob("../*/*.go")
	if err != nil || len(files) == 0 {
		t.Fatal(err)
	}
	bad := regexp.MustCompile(`install/(kubernetes|ansible|gnsh|man|package)/|\bmake (install|build|package|release|test|demo)\b|README\.md`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0) // no comments
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && bad.MatchString(lit.Value) {
				t.Errorf("%s: %s names what a node does not have", f, lit.Value)
			}
			return true
		})
	}
}
