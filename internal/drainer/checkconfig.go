package drainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/kube"
)

// CheckConfig is CheckConfigFile without what it could not check and
// without gnsh's own kubeconfig (for gnsh doctor, whose kubeconfig check
// says both).
func (d *Drainer) CheckConfig(skipKubeconfig bool) (found bool, err error) {
	found, _, err = d.checkConfigFile(skipKubeconfig, false)
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
// checked: this user may not read it (or a file it names). A file that
// names none is held to the kubeconfig a shutdown then uses when that is
// gnsh's own /etc/gnsh/kubeconfig, which refuses every shutdown just as a
// named one does when it cannot be used.
func (d *Drainer) CheckConfigFile(skipKubeconfig bool) (found bool, unchecked *config.Problem, err error) {
	return d.checkConfigFile(skipKubeconfig, true)
}

func (d *Drainer) checkConfigFile(skipKubeconfig, own bool) (found bool, unchecked *config.Problem, err error) {
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
	if skipKubeconfig || (kc == "" && !own) {
		return found, nil, err
	}
	if kc == "" && ce != nil && hasPath(ce, "kubeconfig") {
		// The key is there, but refused: nothing more to say of it.
		return found, nil, err
	}
	var p *config.Problem
	var ue *kube.UnreadableError
	if kc != "" {
		p, ue = d.kubeconfigProblem(path, kc, line)
	}
	if p == nil && ue == nil && own {
		p, ue = d.ownKubeconfigProblem(path, kc, cfg)
	}
	switch {
	case p != nil:
		if cfg.Drain || ce != nil {
			p.Msg += ": until then every shutdown through gnsh is refused, but with --no-drain"
		} else {
			p.Msg += ": until then gnsh drain, gnsh uncordon and the node agent cannot work (with drain: false, shutdowns go on undrained)"
		}
		if ce == nil {
			ce = &config.Error{File: path, Kubeconfig: kc, KubeconfigLine: line}
		}
		ce.Add(*p)
		return found, nil, ce
	case ue != nil:
		unchecked = &config.Problem{Line: line, Path: "kubeconfig",
			Msg: fmt.Sprintf("not checked: this user may not read %s (%v); run gnsh config check as root, as every shutdown through gnsh runs", ue.Path, ue.Reason())}
		if kc == "" {
			unchecked.Msg = "not set, so gnsh's own " + ue.Path + " is used; " + unchecked.Msg
		}
	}
	return found, unchecked, err
}

// hasPath reports whether ce has a problem at path.
func hasPath(ce *config.Error, path string) bool {
	for _, p := range ce.Problems {
		if p.Path == path {
			return true
		}
	}
	return false
}

// ownKubeconfigProblem checks gnsh's own kubeconfig (kube.GnshKubeconfig)
// where a shutdown uses it, as the wrapper finds it: as the drain's when
// the config file names none (kc) and the node has no kubelet.conf, and
// as the reboot-slot gate's whenever it is there and the gate is on. It
// returns the problem it is, if it cannot be used; or, if this user may
// not read it, that error. Any other (kubelet.conf, $KUBECONFIG) is not
// gnsh's to judge.
func (d *Drainer) ownKubeconfigProblem(file, kc string, cfg config.Config) (*config.Problem, *kube.UnreadableError) {
	loc := kube.Locator{Kubeconfig: kc, Getenv: d.getenv, Root: d.KubeRoot}
	if cfg.Slots.Kubeconfig != "" {
		loc.GateKubeconfigPath, loc.GateKubeconfigFrom = cfg.Slots.Kubeconfig, "slots.kubeconfig in "+file
	}
	path, err := loc.FindKubeconfig()
	what := "not set, so gnsh's own kubeconfig is used, and "
	if err == nil && cfg.Slots.Gate != config.GateOff {
		_, err = loc.GateKubeconfig(path)
		what = "gnsh's own kubeconfig is the reboot-slot gate's, and "
	}
	var ke *kube.KubeconfigError
	var ue *kube.UnreadableError
	switch {
	case errors.As(err, &ke) && ke.Path == cfg.Slots.Kubeconfig && !ke.FromGnshOwn():
		b, _ := os.ReadFile(file)
		return &config.Problem{Line: config.KeyLine(b, "slots.kubeconfig"), Path: "slots.kubeconfig", Msg: ke.What() + "; " + kubeconfigFix(ke)}, nil
	case errors.As(err, &ke) && ke.FromGnshOwn():
		return &config.Problem{Path: "kubeconfig", Msg: what + ke.What() + "; " + kubeconfigFix(ke)}, nil
	case errors.As(err, &ue) && ue.Path == filepath.Join(d.KubeRoot, kube.GnshKubeconfig):
		return nil, ue
	}
	return nil, nil
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
