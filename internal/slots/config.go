package slots

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/config"
)

// LimitsOf reads the limits of a configuration (already checked by
// config.Parse: a selector that does not parse matches nothing).
func LimitsOf(c config.Slots) Limits {
	lim := Limits{Max: c.MaxUnavailable, Settle: c.Settle.D()}
	for _, p := range c.Pools {
		sel, err := labels.Parse(p.Selector)
		if err != nil {
			sel = labels.Nothing()
		}
		lim.Pools = append(lim.Pools, Pool{Name: p.Name, Selector: sel, Max: p.MaxUnavailable})
	}
	return lim
}

// NewGate is the gate cfg describes, over client c. Its callbacks are
// left to the caller.
func NewGate(c kubernetes.Interface, cfg config.Config) *Gate {
	s := cfg.Slots
	return &Gate{C: c, Namespace: s.Namespace, Name: s.Lease, Limits: LimitsOf(s), Renew: s.Renew.D(),
		WarnAfter: s.WarnAfter.D(), APITimeout: cfg.APITimeout.D()}
}
