package gnshcli

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

func resetCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "reset",
		Usage: "start the reboot slots anew when their record cannot be read",
		Description: "A record that is not valid JSON refuses every reboot and every release. This " +
			"replaces it with an empty one (every slot free, nobody waiting) unless someone wrote it " +
			"meanwhile, and posts GnshSlotsReset on the Lease. A readable record, or a newer gnsh's, " +
			"only with --force.",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "reset a record that can be read too (frees every slot)"}, adminKubeFlag()},
		Action: func(c *cli.Context) error {
			*code = report(env.Stderr, resetSlots(c, env))
			return nil
		},
	}
}

func resetSlots(c *cli.Context, env *dispatch.Env) error {
	g, cfg, err := slotsGate(c, env)
	if err != nil {
		return err
	}
	// Bounded, as a release: against an API server that keeps answering
	// 409 (or hangs) it gives up rather than retry for ever.
	ctx, cancel := context.WithTimeout(c.Context, 6*cfg.APITimeout.D())
	defer cancel()
	r, err := g.Reset(ctx, c.Bool("force"))
	var re *slots.ReadableError
	switch {
	case errors.As(err, &re):
		return err
	case err != nil:
		return g.Unavailable(err)
	case r.None:
		fmt.Fprintf(env.Stdout, "no Lease %s yet: nothing to reset\n", g.Where())
		return nil
	}
	lost := r.Lost()
	fmt.Fprintf(env.Stdout, "reset the slots record of %s: every slot is free, nobody waits; thrown away: %s\n", g.Where(), termSafe(lost))
	if !cfg.Events {
		return nil
	}
	user := drainer.WhoAsks(func(k string) string { v, _ := env.LookupEnv(k); return v }).User
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(c.Context), 2*cfg.APITimeout.D())
	defer ecancel()
	if err := leaseEvent(ectx, g, r, "Slots record of "+g.Where()+" reset by "+user+" with 'gnsh slots reset': thrown away: "+lost); err != nil {
		fmt.Fprintf(env.Stderr, "gnsh: the %s Event on the Lease %s was not posted: %v\n", slots.ReasonReset, g.Where(), err)
	}
	return nil
}

// leaseEvent posts the Warning of a reset about the Lease, in its
// namespace (where Events about a namespaced object must be): kubectl
// describe lease shows it.
func leaseEvent(ctx context.Context, g *slots.Gate, r slots.Reset, msg string) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: g.Name + ".gnsh.", Namespace: g.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: g.Namespace,
			Name: g.Name, UID: r.UID},
		Reason: slots.ReasonReset, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "gnsh"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err := g.C.CoreV1().Events(g.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
