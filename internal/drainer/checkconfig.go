package drainer

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/kube"
)

// CheckConfig validates the config file as every drain reads it, and the
// kubeconfig it names, which must be usable, without asking the cluster
// anything (gnsh config check, gnsh doctor). --kubeconfig is not
// looked at. found says whether the file exists (without it the defaults
// apply). err is a *config.Error listing every problem of the file, each
// with its line; or one for its kubeconfig key when what it names cannot
// be used (unless skipKubeconfig); or the error reading the file.
func (d *Drainer) CheckConfig(skipKubeconfig bool) (found bool, err error) {
	path := d.configPath()
	_, serr := os.Stat(path)
	found = !errors.Is(serr, fs.ErrNotExist)
	dd := &Drainer{Stderr: io.Discard, ConfigPath: path, Getenv: d.Getenv, KubeRoot: d.KubeRoot}
	r := newRun(dd, forShutdown, "check")
	if err := r.loadConfig(nil); err != nil {
		return found, err
	}
	if skipKubeconfig {
		return found, nil
	}
	var ke *kube.KubeconfigError
	if err := r.namedKubeconfig(); errors.As(err, &ke) {
		b, _ := os.ReadFile(path)
		return found, &config.Error{File: path, Problems: []config.Problem{{
			Line: config.KeyLine(b, "kubeconfig"), Path: "kubeconfig",
			Msg: ke.What() + "; " + kubeconfigFix(ke) + ": until then every shutdown through gnsh is refused, but with --no-drain",
		}}}
	}
	return found, nil
}
