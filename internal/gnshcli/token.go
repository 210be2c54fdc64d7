package gnshcli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/kube"
)

// tokenStdin is where gnsh token install reads the token, and whether it
// is a terminal (tests replace it).
var tokenStdin = func() (io.Reader, bool) {
	_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS)
	return os.Stdin, err == nil
}

func tokenCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "the reboot-slot gate's token in " + kube.GnshKubeconfig,
		Description: "The gate's identity is a short-lived token of the ServiceAccount kube-system/gnsh, " +
			"bound to this node's Node; the node agent renews it. 'install' delivers the first one.",
		Subcommands: []*cli.Command{{
			Name:  "install",
			Usage: "as root, write a token from stdin into " + kube.GnshKubeconfig,
			Description: "Reads a kube-system/gnsh token on stdin (never an argument), refuses one bound to " +
				"another node, writes it (0600; slots.kubeconfig if set) with the API server and CA of the flags, else " +
				"of the kubelet's kubeconfig. Prints its expiry, never the token; the agent renews it.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "server", Usage: "the API server's `URL` (default: the kubelet's)"},
				&cli.StringFlag{Name: "certificate-authority", Usage: "the API server's CA `FILE` (PEM; default: the kubelet's)"},
				nodeFlag(),
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return usagef(c, "gnsh token install takes no arguments: the token comes on stdin")
				}
				*code = report(env.Stderr, installToken(c, env))
				return nil
			},
		}},
	}
}

// installToken is gnsh token install.
func installToken(c *cli.Context, env *dispatch.Env) error {
	in, tty := tokenStdin()
	if tty {
		return errors.New("gnsh token install reads the token from a pipe, not a terminal: " +
			"kubectl -n kube-system create token gnsh --bound-object-kind Node --bound-object-name NODE --duration 24h | ssh NODE gnsh token install")
	}
	data, err := io.ReadAll(io.LimitReader(in, 64<<10))
	if err != nil {
		return fmt.Errorf("reading the token on stdin: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return errors.New("no token on stdin (one line expected): kubectl -n kube-system create token gnsh " +
			"--bound-object-kind Node --bound-object-name NODE --duration 24h | gnsh token install")
	}
	cl, err := gatetoken.ParseClaims(token)
	if err != nil {
		return fmt.Errorf("the token on stdin: %w", err)
	}
	if !cl.IsGnsh() {
		return fmt.Errorf("the token on stdin belongs to %s, not to the ServiceAccount %s/%s of gnsh's rbac.yaml", cl.Subject, gatetoken.Namespace, gatetoken.ServiceAccount)
	}
	now := env.Now()
	if !cl.Expiry.IsZero() && !now.Before(cl.Expiry) {
		return fmt.Errorf("the token on stdin expired at %s: create a new one", cl.Expiry.UTC().Format("2006-01-02 15:04 UTC"))
	}
	root := ""
	if env.Host != nil {
		root = env.Host.Root
	}
	at := func(p string) string {
		if root == "" {
			return p
		}
		return filepath.Join(root, p)
	}
	// The config file names the drain's kubeconfig (whose API server and
	// CA the gate shares: k3s, rke2) and the gate's (slots.kubeconfig),
	// where the agent renews the token: it is written there.
	node := c.String("node")
	drainKC, gateKC := kube.KubeletKubeconfig, kube.GnshKubeconfig
	for _, p := range kube.KubeletKubeconfigs() { // kubeadm's, k3s's, rke2's
		if _, err := os.Stat(at(p)); err == nil {
			drainKC = p
			break
		}
	}
	if cfg, err := config.Load(at(config.Path)); err == nil {
		if node == "" {
			node = cfg.Node
		}
		if cfg.Kubeconfig != "" {
			drainKC = cfg.Kubeconfig
		}
		if cfg.Slots.Kubeconfig != "" {
			gateKC = cfg.Slots.Kubeconfig
		}
	}
	if node != "" && cl.NodeName != "" && cl.NodeName != node {
		return fmt.Errorf("the token on stdin is bound to Node %s, but this node is %s: create one bound to %s", cl.NodeName, node, node)
	}
	server, ca, kubeletNode, err := clusterOf(c, drainKC, at(drainKC))
	if err != nil {
		return err
	}
	if node == "" {
		node = kubeletNode
	}
	warn := ""
	switch {
	case cl.OtherBinding != "":
		return fmt.Errorf("the token on stdin is bound to a %s: create it bound to this node's Node (--bound-object-kind Node --bound-object-name NODE)", cl.OtherBinding)
	case cl.NodeName == "":
		warn = "gnsh: warning: the token is not bound to a Node: it stays valid until it expires even once the Node is deleted, " +
			"and the node agent cannot renew it; create it with --bound-object-kind Node --bound-object-name NODE"
	case node != "" && cl.NodeName != node:
		return fmt.Errorf("the token on stdin is bound to Node %s, but this node is %s: create one bound to %s", cl.NodeName, node, node)
	case node == "":
		h, _ := os.Hostname()
		short, _, _ := strings.Cut(strings.ToLower(h), ".")
		if first, _, _ := strings.Cut(cl.NodeName, "."); first != short {
			warn = fmt.Sprintf("gnsh: warning: the token is bound to Node %s, and this node's name is not known (no --node, no node in %s, no kubelet certificate): check it is this one", cl.NodeName, config.Path)
		}
	}
	k := gatetoken.New(at(gateKC), server, ca, token)
	err = os.MkdirAll(filepath.Dir(k.Path), 0o755)
	if err == nil {
		err = k.Save()
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%v: run gnsh token install as root", err)
	}
	if err != nil {
		return err
	}
	if warn != "" {
		fmt.Fprintln(env.Stderr, warn)
	}
	what := "kube-system/gnsh"
	if cl.NodeName != "" {
		what += " bound to Node " + cl.NodeName
	}
	switch {
	case cl.Expiry.IsZero():
		what += ", never expires"
	default:
		what += fmt.Sprintf(", valid until %s (in %s)", cl.Expiry.UTC().Format("2006-01-02 15:04 UTC"), gatetoken.Human(cl.Expiry.Sub(now)))
	}
	renews := "; the node agent renews it"
	if cl.NodeName == "" || cl.Expiry.IsZero() {
		renews = ""
	}
	fmt.Fprintf(env.Stdout, "gnsh: installed the gate's token in %s: %s%s\n", gateKC, termSafe(what), renews)
	return nil
}

// clusterOf is the API server and CA for the gate's kubeconfig: the
// flags', else those of the drain's kubeconfig (the kubelet's, named
// name, read at kubelet: same API server); and the node's name from the
// kubelet's client certificate, if it says.
func clusterOf(c *cli.Context, name, kubelet string) (server string, ca []byte, node string, err error) {
	server = c.String("server")
	if f := c.String("certificate-authority"); f != "" {
		if ca, err = os.ReadFile(f); err != nil {
			return "", nil, "", fmt.Errorf("--certificate-authority: %w", err)
		}
	}
	raw, lerr := clientcmd.LoadFromFile(kubelet)
	if lerr == nil && clientcmd.ResolveLocalPaths(raw) == nil {
		if rc, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig(); err == nil {
			node = kube.NodeIdentity(rc)
			if server == "" {
				server = rc.Host
			}
			if ca == nil {
				ca = caOf(rc)
			}
		}
	}
	switch {
	case server == "" || len(ca) == 0:
		why := "it cannot be read"
		if lerr != nil {
			why = lerr.Error()
		}
		return "", nil, "", fmt.Errorf("no API server or CA: pass --server URL and --certificate-authority FILE (the kubelet's %s: %s)", name, why)
	case !strings.HasPrefix(server, "https://"):
		return "", nil, "", fmt.Errorf("the API server %s is not https: a token is sent only over TLS", server)
	}
	return server, ca, node, nil
}

func caOf(rc *rest.Config) []byte {
	if len(rc.TLSClientConfig.CAData) > 0 {
		return rc.TLSClientConfig.CAData
	}
	if rc.TLSClientConfig.CAFile != "" {
		if b, err := os.ReadFile(rc.TLSClientConfig.CAFile); err == nil {
			return b
		}
	}
	return nil
}
