package gnshcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/nodefacts"
)

// gateTokenClient, if set, replaces the client the renewer asks with
// (tests).
var gateTokenClient func(*gatetoken.Kubeconfig) (kubernetes.Interface, error)

// renewGateToken runs the node agent's renewal of the gate's token in
// its kubeconfig (slots.kubeconfig, else /etc/gnsh/kubeconfig; internal/gatetoken) until ctx ends: at once, then
// as it falls due. Its lines go to out; its state, for gnsh status and
// doctor, to the lock directory. It idles while there is no such file or
// no embedded token in it. The returned channel closes once it is over.
func renewGateToken(ctx context.Context, d *drainer.Drainer, cfg config.Config, out io.Writer) <-chan struct{} {
	path := kube.GnshKubeconfig
	if cfg.Slots.Kubeconfig != "" {
		path = cfg.Slots.Kubeconfig // the gate's kubeconfig, named in the config file
	}
	if d.KubeRoot != "" {
		path = filepath.Join(d.KubeRoot, path)
	}
	state := nodefacts.GateTokenStatePath
	if d.LockDir != "" {
		state = filepath.Join(d.LockDir, filepath.Base(state))
	}
	rn := &gatetoken.Renewer{
		Path:    path,
		Client:  gateTokenClient,
		Timeout: cfg.APITimeout.D(),
		Clock:   d.Clock,
		Say:     func(l string) { fmt.Fprintln(out, l) },
		Record: func(st gatetoken.State) {
			if data, err := json.Marshal(st); err == nil {
				_ = gatetoken.WriteFile(state, data)
			}
		},
	}
	done := make(chan struct{})
	go func() { defer close(done); rn.Run(ctx) }()
	return done
}
