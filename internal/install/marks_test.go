package install

import (
	"os"
	"strings"
	"testing"

	"github.com/gnsh/gnsh/internal/nodefacts"
)

// gnsh doctor tells how gnsh was installed from the files each way leaves
// (nodefacts.InstallFacts): this record, and the package's rbac.yaml and
// rbac.md.
func TestDoctorKnowsTheInstallMarks(t *testing.T) {
	if nodefacts.InstallRecord != StatePath {
		t.Errorf("nodefacts.InstallRecord %s, gnsh install writes %s", nodefacts.InstallRecord, StatePath)
	}
	nfpm, err := os.ReadFile("../../install/package/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rbac.yaml", "rbac.md"} {
		if !strings.Contains(string(nfpm), "dst: "+nodefacts.PackageDocs+"/"+f+"\n") {
			t.Errorf("the packages do not ship %s/%s", nodefacts.PackageDocs, f)
		}
	}
}
