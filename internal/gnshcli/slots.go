package gnshcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
)

func slotsCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "slots",
		Usage: "list the reboot slots: who holds one, who waits, who is out",
		Description: "Reads the reboot slots' Lease (slots.namespace/slots.lease, default " +
			"gnsh/reboot-slots) with an admin's kubeconfig or gnsh's own (not the kubelet's).",
		Flags: []cli.Flag{outputFlag(), adminKubeFlag()},
		Action: func(c *cli.Context) error {
			if err := checkOutput(c); err != nil {
				return err
			}
			*code = report(env.Stderr, listSlots(c, env))
			return nil
		},
		Subcommands: []*cli.Command{{
			Name:  "release",
			Usage: "free a node's reboot slot and place in the queue by hand",
			Description: "For a node that will not come back to free its slot itself (reinstalled, or down " +
				"for good with its Node still there). Slots of deleted Nodes, of nodes back and settled " +
				"and of given-up shutdowns are freed without it.",
			Flags: []cli.Flag{&cli.StringFlag{Name: "node", Required: true, Usage: "the `NAME` of the Node whose slot to free"}, adminKubeFlag()},
			Action: func(c *cli.Context) error {
				*code = report(env.Stderr, releaseSlot(c, env))
				return nil
			},
		}, resetCommand(code, env)},
	}
}

// adminKubeconfigOrder is where gnsh slots looks for a kubeconfig when
// --kubeconfig is not given, in order (adminKubeconfig).
var adminKubeconfigOrder = "$KUBECONFIG, ~/.kube/config, kubeconfig in the config file, " + kube.GnshKubeconfig + ", " + kube.KubeletKubeconfigList()

func adminKubeFlag() cli.Flag {
	return &cli.StringFlag{Name: "kubeconfig", Usage: "the kubeconfig `FILE` (default: $KUBECONFIG, ~/.kube/config, kubeconfig in the config file, " +
		kube.GnshKubeconfig + ", the kubelet's (kubeadm, k3s, rke2))"}
}

// slotsGate connects to the gate of the config file with an admin's
// kubeconfig (adminKubeconfig).
func slotsGate(c *cli.Context, env *dispatch.Env) (*slots.Gate, config.Config, error) {
	d := newDrainer(c, env)
	cfg, err := config.Load(d.ConfigFile())
	if err != nil {
		return nil, cfg, err
	}
	loc := d.Locator(cfg)
	// --kubeconfig first; the config file's kubeconfig key (the node's own
	// identity) only after an admin's.
	loc.Kubeconfig = c.String("kubeconfig")
	if loc.Kubeconfig != "" {
		loc.KubeconfigFrom = kube.FromFlag
	}
	path, note, err := adminKubeconfig(&loc, cfg.Kubeconfig, func(k string) string { v, _ := env.LookupEnv(k); return v })
	if err != nil {
		return nil, cfg, err
	}
	// Which identity it asks with, on stderr (stdout stays the listing).
	fmt.Fprintf(env.Stderr, "gnsh: using the kubeconfig %s%s\n", termSafe(path), termSafe(note))
	rc, err := loc.RESTConfig(path)
	if err != nil {
		return nil, cfg, err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, cfg, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	g := slots.NewGate(kc, cfg)
	g.Kubeconfig = path
	return g, cfg, nil
}

// adminKubeconfig finds the kubeconfig of gnsh slots and slots release,
// commands an admin types: --kubeconfig (loc.Kubeconfig), then
// $KUBECONFIG, then the user's own ~/.kube/config (as kubectl), then the
// config file's kubeconfig key (fileKey), gnsh's and the kubelet's
// (kube.Locator). ~/.kube/config is used only when it, and the symlink it
// may be, belong to this user or to root: a kubeconfig can run commands
// (exec credential plugins), and root with another user's $HOME must not
// run that user's. note says why a ~/.kube/config found was not used.
func adminKubeconfig(loc *kube.Locator, fileKey string, getenv func(string) string) (path, note string, err error) {
	if loc.Kubeconfig == "" && !anyExists(filepath.SplitList(getenv("KUBECONFIG"))) {
		p, why := homeKubeconfig(getenv)
		switch {
		case p != "" && why == "":
			loc.Kubeconfig, loc.KubeconfigFrom = p, "~/.kube/config"
		case why != "":
			note = " (" + why + ")"
		}
		if loc.Kubeconfig == "" {
			loc.Kubeconfig = fileKey
		}
	}
	path, err = loc.FindKubeconfig()
	if errors.Is(err, kube.ErrNoKubeconfig) {
		return "", "", fmt.Errorf("no kubeconfig found (%s)%s: pass --kubeconfig FILE or set $KUBECONFIG to an admin's kubeconfig",
			adminKubeconfigOrder, note)
	}
	return path, note, err
}

// geteuid is os.Geteuid (tests).
var geteuid = os.Geteuid

// homeKubeconfig is ~/.kube/config of this user ($HOME, else the
// password database), if it exists; why says why it is not used.
func homeKubeconfig(getenv func(string) string) (path, why string) {
	home := getenv("HOME")
	if home == "" {
		if u, err := user.Current(); err == nil {
			home = u.HomeDir
		}
	}
	if home == "" {
		return "", ""
	}
	path = filepath.Join(home, ".kube", "config")
	lfi, err := os.Lstat(path)
	if err != nil {
		return "", "" // none (or not looked at: as none)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", ""
	}
	uid := geteuid()
	for _, f := range []fs.FileInfo{lfi, fi} {
		st, ok := f.Sys().(*syscall.Stat_t)
		if ok && int(st.Uid) != uid && st.Uid != 0 {
			return "", fmt.Sprintf("%s not used: it belongs to uid %d, not to this user (uid %d)", path, st.Uid, uid)
		}
	}
	if !fi.Mode().IsRegular() {
		return "", ""
	}
	return path, ""
}

// anyExists reports whether one of paths is there (or cannot be looked
// at: kube.Locator reports that).
func anyExists(paths []string) bool {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

// slotsView is `gnsh slots --output json`.
type slotsView struct {
	Lease          string        `json:"lease"`
	Gate           string        `json:"gate"`
	MaxUnavailable int           `json:"maxUnavailable"`
	Pools          []config.Pool `json:"pools"`
	Holders        []slots.Entry `json:"holders"`
	Waiters        []slots.Entry `json:"waiters"`
	Out            []slots.Out   `json:"out"`
	OutError       string        `json:"outError,omitempty"`
	// Window is this node's slots.window (queued reboots are admitted
	// only within it), "" for none.
	Window string `json:"window,omitempty"`
}

func listSlots(c *cli.Context, env *dispatch.Env) error {
	g, cfg, err := slotsGate(c, env)
	if err != nil {
		return err
	}
	rec, _, err := g.Read(c.Context)
	if err != nil {
		return g.Unavailable(err)
	}
	v := slotsView{Lease: g.Where(), Gate: cfg.Slots.Gate, MaxUnavailable: cfg.Slots.MaxUnavailable, Pools: cfg.Slots.Pools,
		Holders: rec.Holders, Waiters: rec.Waiters, Out: []slots.Out{}}
	if w, _ := cfg.QueueWindow(); w != nil {
		v.Window = w.String()
	}
	// Lists, never null (no Lease yet, or an empty record).
	if v.Pools == nil {
		v.Pools = []config.Pool{}
	}
	if v.Holders == nil {
		v.Holders = []slots.Entry{}
	}
	if v.Waiters == nil {
		v.Waiters = []slots.Entry{}
	}
	if v.Out, err = outNodes(c.Context, g, rec); err != nil {
		v.OutError = err.Error()
	}
	if c.String("output") == "json" {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	writeSlots(env.Stdout, v)
	return nil
}

// outNodes lists the nodes that count as out without holding a slot.
func outNodes(ctx context.Context, g *slots.Gate, rec slots.Record) ([]slots.Out, error) {
	ctx, cancel := context.WithTimeout(ctx, g.APITimeout)
	defer cancel()
	nl, err := g.C.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []slots.Out{}, err
	}
	out := []slots.Out{}
	for i := range nl.Items {
		s := slots.StateOf(&nl.Items[i])
		if _, held := rec.Holder(s.Name); held {
			continue
		}
		if why := s.Out(); why != "" {
			out = append(out, slots.Out{Node: s.Name, Why: why})
		}
	}
	return out, nil
}

// writeSlots writes v for a terminal. Every text from the Lease (node,
// phase, action, who: written by any node holding gnsh's token) or the
// cluster goes through termSafe: no control character reaches the
// terminal, and none breaks the columns.
func writeSlots(w io.Writer, v slotsView) {
	t := termSafe
	limits := fmt.Sprintf("limit %d", v.MaxUnavailable)
	for _, p := range v.Pools {
		limits += fmt.Sprintf("; pool %s (%s) %d", t(p.Name), t(p.Selector), p.MaxUnavailable)
	}
	if v.Window != "" {
		limits += "; queued reboots within " + t(v.Window)
	}
	fmt.Fprintf(w, "reboot slots %s (gate %s): %s\n", t(v.Lease), t(v.Gate), limits)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	entry := func(kind string, e slots.Entry, phase string) {
		who := t(e.Action)
		if e.Who != "" {
			who += " by " + t(e.Who)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tasked %s\t%s\n", kind, t(e.Node), t(phase), e.Since.UTC().Format("2006-01-02T15:04:05Z"), who)
	}
	for _, h := range v.Holders {
		entry("holder", h, string(h.Phase))
	}
	for i, e := range v.Waiters {
		place := fmt.Sprintf("place %d", i+1)
		if e.Queued {
			place += ", queued" // its node agent carries it
		}
		entry("waiting", e, place)
	}
	for _, o := range v.Out {
		fmt.Fprintf(tw, "out\t%s\t%s\t\t\n", t(o.Node), t(o.Why))
	}
	tw.Flush()
	if len(v.Holders)+len(v.Waiters)+len(v.Out) == 0 {
		fmt.Fprintln(w, "no slot held, no node waiting or out")
	}
	if v.OutError != "" {
		fmt.Fprintf(w, "nodes out: unknown (%s)\n", t(strings.TrimSpace(v.OutError)))
	}
}

func releaseSlot(c *cli.Context, env *dispatch.Env) error {
	g, cfg, err := slotsGate(c, env)
	if err != nil {
		return err
	}
	node := c.String("node")
	var freed, dropped *slots.Entry
	// Bounded: against an API server that keeps answering 409 (or hangs)
	// it gives up rather than retry for ever.
	ctx, cancel := context.WithTimeout(c.Context, 6*cfg.APITimeout.D())
	defer cancel()
	_, err = g.Update(ctx, func(rec *slots.Record) bool {
		freed, dropped = rec.Forget(node)
		return freed != nil || dropped != nil
	})
	if err != nil {
		return g.Unavailable(err)
	}
	if freed == nil && dropped == nil {
		return fmt.Errorf("%q holds no reboot slot of %s and is not waiting for one; 'gnsh slots' lists who does", node, g.Where())
	}
	user := drainer.WhoAsks(func(k string) string { v, _ := env.LookupEnv(k); return v }).User
	if h := freed; h != nil {
		fmt.Fprintf(env.Stdout, "freed the reboot slot of %s (%s, %s by %s)\n", termSafe(node), termSafe(string(h.Phase)), termSafe(h.Action), termSafe(h.Who))
		if cfg.Events {
			// Its own bound: the release may have used up ctx's.
			ectx, ecancel := context.WithTimeout(context.WithoutCancel(c.Context), 2*cfg.APITimeout.D())
			err := drainer.PostEvent(ectx, g.C, node, "Warning", slots.ReasonReleased,
				fmt.Sprintf("Reboot slot of %s (%s, %s by %s) freed by %s with 'gnsh slots release'", g.Where(), h.Phase, h.Action, h.Who, user), cfg.APITimeout.D())
			ecancel()
			if err != nil {
				fmt.Fprintf(env.Stderr, "gnsh: the %s Event on %s was not posted: %v\n", slots.ReasonReleased, termSafe(node), err)
			}
		}
	}
	if dropped != nil {
		fmt.Fprintf(env.Stdout, "took %s out of the queue\n", termSafe(node))
	}
	return nil
}
