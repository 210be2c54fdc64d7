package drainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/kube"
)

// CheckConfig is CheckConfigFile without what it could not check (for gnsh
// doctor, whose kubeconfig check says that).
func (d *Drainer) CheckConfig(skipKubeconfig bool) (found bool, err error) {
	found, _, err = d.CheckConfigFile(skipKubeconfig)
	return found, err
}

// CheckConfigFile validates the config file as every drain reads it, and
// the kubeconfig it names, which must be usable, without asking the
// cluster anything (gnsh config check). --kubeconfig is not looked at.
// found says whether the file exists (without it the defaults apply). err
// is a *config.Error listing every problem of the file, each with its
// line, the kubeconfig it names among them when that cannot be used
// (unless skipKubeconfig), even in an invalid file; or the error reading
// the file. unchecked, if not nil, is why that kubeconfig could not be
// checked: this user may not read it (or a file it names).
func (d *Drainer) CheckConfigFile(skipKubeconfig bool) (found bool, unchecked *config.Problem, err error) {
	path := d.configPath()
	_, serr := os.Stat(path)
	found = !errors.Is(serr, fs.ErrNotExist)
	cfg, err := config.Load(path)
	var ce *config.Error
	kc, line := cfg.Kubeconfig, 0
	switch {
	case errors.As(err, &ce):
		kc, line = ce.Kubeconfig, ce.KubeconfigLine
	case err != nil:
		return found, nil, err
	case kc != "":
		b, _ := os.ReadFile(path)
		line = config.KeyLine(b, "kubeconfig")
	}
	if skipKubeconfig || kc == "" {
		return found, nil, err
	}
	p, ue := d.kubeconfigProblem(path, kc, line)
	switch {
	case p != nil:
		p.Msg += ": until then every shutdown through gnsh is refused, but with --no-drain"
		if ce == nil {
			ce = &config.Error{File: path, Kubeconfig: kc, KubeconfigLine: line}
		}
		ce.Add(*p)
		return found, nil, ce
	case ue != nil:
		unchecked = &config.Problem{Line: line, Path: "kubeconfig",
			Msg: fmt.Sprintf("not checked: this user may not read %s (%v); run gnsh config check as root, as every shutdown through gnsh runs", ue.Path, ue.Reason())}
	}
	return found, unchecked, err
}

// kubeconfigProblem checks kc, the kubeconfig named at line of the config
// file path, as far as can be done without the API server: the problem
// it is, if it cannot be used (a mistake in the configuration, as an
// invalid file is); or, if this user may not read it, that error.
func (d *Drainer) kubeconfigProblem(path, kc string, line int) (*config.Problem, *kube.UnreadableError) {
	loc := kube.Locator{Kubeconfig: kc, KubeconfigFrom: "kubeconfig in " + path, Getenv: d.getenv, Root: d.KubeRoot}
	_, err := loc.FindKubeconfig()
	var ke *kube.KubeconfigError
	var ue *kube.UnreadableError
	switch {
	case errors.As(err, &ke):
		return &config.Problem{Line: line, Path: "kubeconfig", Msg: ke.What() + "; " + kubeconfigFix(ke)}, nil
	case errors.As(err, &ue):
		return nil, ue
	}
	return nil, nil
}
