// Package nodefacts gathers, read-only, what `gnsh status` shows and
// `gnsh doctor` judges about this node: systemd and logind (over D-Bus),
// logind.conf drop-ins, kubelet's shutdown settings, what the four legacy
// commands resolve to, the kubeconfig, the Node and gnsh's cordon record.
//
// Every fact is gathered on its own, bounded by a timeout, and a fact that
// cannot be had records its error in place: one missing fact never fails
// the report. Nothing here changes anything: no logind method but reads,
// no StartUnit, no cordon. Every file path is read below Sources.Root, so
// tests build a fake tree.
package nodefacts

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/handoff"
)

// DefaultTimeout bounds each D-Bus step (connecting, each call).
const DefaultTimeout = 5 * time.Second

// AgentUnit is the node agent's systemd unit.
const AgentUnit = "gnsh.service"

// Report is every fact, as `gnsh status --output json` prints it. Field
// names are stable; an "error" field says why a fact is missing.
type Report struct {
	Systemd    SystemdFacts    `json:"systemd"`
	Logind     LogindFacts     `json:"logind"`
	LogindConf LogindConfFacts `json:"logindConf"`
	Kubelet    KubeletFacts    `json:"kubelet"`
	Commands   CommandFacts    `json:"commands"`
	Kubeconfig KubeconfigFacts `json:"kubeconfig"`
	Node       NodeFacts       `json:"node"`
	Drain      DrainFacts      `json:"drain"`
	Agent      AgentFacts      `json:"agent"`
	Slots      SlotsFacts      `json:"slots"`
	// GateToken is the gate's token in /etc/gnsh/kubeconfig; nil when
	// there is none.
	GateToken *GateTokenFacts `json:"gateToken,omitempty"`
	// Access is asked only with Sources.Access (gnsh doctor): nil otherwise.
	Access *AccessFacts `json:"access,omitempty"`
	// Install shapes doctor's fixes; not in status's JSON.
	Install InstallFacts `json:"-"`
}

// DrainFacts is the drain as gnsh's config file sets it (the defaults
// when the file is missing or invalid).
type DrainFacts struct {
	Enabled    bool    `json:"enabled"`
	Timeout    string  `json:"timeout"` // drainTimeout, e.g. "5m0s"
	TimeoutSec float64 `json:"timeoutSec"`
}

// SlotsFacts is the reboot-slot gate (internal/slots) as this node sees
// it.
type SlotsFacts struct {
	Gate           string   `json:"gate"`  // off, optional, required
	Lease          string   `json:"lease"` // NAMESPACE/NAME
	MaxUnavailable int      `json:"maxUnavailable"`
	Pools          []string `json:"pools"` // "NAME (SELECTOR): N"
	// Kubeconfig is the gate's kubeconfig (slots.kubeconfig, else gnsh's
	// own /etc/gnsh/kubeconfig, else the drain's), Mode its mode; User
	// its identity as the API server sees it (gnsh doctor).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Mode       string `json:"mode,omitempty"`
	User       string `json:"user,omitempty"`
	// Reachable: the Lease could be read (or does not exist yet) with
	// the gate's credentials; Error says why not, and Cause which step
	// failed (Cause* below).
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	Cause     string `json:"cause,omitempty"`
	// Unchecked (gnsh doctor): the gate's requests whose review failed,
	// with why: whether the gate may make them is not known.
	Unchecked string `json:"unchecked,omitempty"`
	// Degraded (gnsh doctor): the gate's optional requests refused (the
	// kubelet heartbeats of an rbac.yaml older than this gnsh): it works,
	// but frees no given-up shutdown's slot (the node agents do).
	Degraded string `json:"degraded,omitempty"`
	// Excess (gnsh doctor): rights of ExcessRequests (an earlier gnsh's
	// gnsh:drain and gnsh:events) the gate's ServiceAccount still has.
	Excess  string   `json:"excess,omitempty"`
	Holders []string `json:"holders"` // "NODE (PHASE)"
	Waiting int      `json:"waiting"`
	// This is this node's place: "holder (PHASE)", "waiting (place N)" or
	// "none".
	This string `json:"this,omitempty"`
}

// Causes of SlotsFacts: why the gate could not be read.
const (
	CauseNotANode   = "not-a-node" // no kubeconfig found: the gate does not apply
	CauseKubeconfig = "kubeconfig" // a kubeconfig that cannot be read or used
	CauseAPIServer  = "api-server" // no answer from the API server
	CauseNode       = "node"       // this node's name is unknown
	CauseLease      = "lease"      // the Lease could not be read
	CauseAccess     = "access"     // the gate's identity may not make its requests
	CauseEtcdPods   = "etcd-pods"  // the gate's identity may not list the pods of kube-system: every reboot waits for etcd's quorum
	// The Lease was read but not its record: every reboot is refused,
	// whatever slots.gate says.
	CauseRecord = "record"       // not valid JSON: gnsh slots reset
	CauseNewer  = "newer-record" // written by a newer gnsh: upgrade this one
)

// SystemdFacts is PID 1.
type SystemdFacts struct {
	// Booted: /run/systemd/system exists (sd_booted()).
	Booted bool `json:"booted"`
	// Version is PID 1's Version property as it reads, e.g. "252.39-1~deb12u1"
	// or "239 (239-78.el8)"; Major its leading number (0 when unknown).
	Version string `json:"version,omitempty"`
	Major   int    `json:"major,omitempty"`
	// RHEL8 is true for a RHEL 8 build ("el8" in the version), whose
	// legacy commands go through logind only with SYSTEMD_NEW_SHUTDOWN=1.
	RHEL8 bool `json:"rhel8,omitempty"`
	// NewShutdownEnv is SYSTEMD_NEW_SHUTDOWN as set in this environment.
	NewShutdownEnv string `json:"newShutdownEnv,omitempty"`
	Error          string `json:"error,omitempty"`
}

// LogindFacts is what systemd-logind says.
type LogindFacts struct {
	Reachable bool `json:"reachable"`
	// InhibitDelayMax is InhibitDelayMaxUSec as a Go duration ("30s");
	// InhibitDelayMaxSec the same in seconds.
	InhibitDelayMax      string     `json:"inhibitDelayMax,omitempty"`
	InhibitDelayMaxSec   float64    `json:"inhibitDelayMaxSec"`
	InhibitDelayMaxError string     `json:"inhibitDelayMaxError,omitempty"`
	Inhibitors           []Lock     `json:"inhibitors,omitempty"`
	InhibitorsError      string     `json:"inhibitorsError,omitempty"`
	KubeletLock          bool       `json:"kubeletLock"` // a delay lock on shutdown held by who "kubelet"
	GnshLock             bool       `json:"gnshLock"`    // a delay lock on shutdown held by who "gnsh"
	Scheduled            *Scheduled `json:"scheduled,omitempty"`
	ScheduledError       string     `json:"scheduledError,omitempty"`
	Error                string     `json:"error,omitempty"`
}

// Lock is one inhibitor of ListInhibitors.
type Lock struct {
	What string `json:"what"`
	Who  string `json:"who"`
	Why  string `json:"why"`
	Mode string `json:"mode"`
	UID  uint32 `json:"uid"`
	PID  uint32 `json:"pid"`
}

// Scheduled is logind's ScheduledShutdown, when something is scheduled.
type Scheduled struct {
	Type string `json:"type"`
	// Time is RFC 3339, empty when the µs name no moment (an immediate
	// action in progress, or a time past the year 294247).
	Time string `json:"time,omitempty"`
	USec uint64 `json:"usec"`
}

// LogindConfFacts is where InhibitDelayMaxSec comes from.
type LogindConfFacts struct {
	// Files lists, in systemd's order, every logind.conf file read and
	// what it sets InhibitDelayMaxSec to ("" = does not set it).
	Files []ConfFile `json:"files,omitempty"`
	// Effective is the value the last setting gives ("5s", the default,
	// when none does), EffectiveSec the same in seconds (-1 = infinity),
	// and EffectiveFile the file that set it ("" = the default).
	Effective     string  `json:"effective"`
	EffectiveSec  float64 `json:"effectiveSec"`
	EffectiveFile string  `json:"effectiveFile,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// ConfFile is one logind.conf file.
type ConfFile struct {
	Path               string `json:"path"`
	InhibitDelayMaxSec string `json:"inhibitDelayMaxSec,omitempty"`
	Masked             bool   `json:"masked,omitempty"` // a link to /dev/null or empty: hides same-named drop-ins
	Error              string `json:"error,omitempty"`
}

// KubeletFacts is kubelet's graceful node shutdown configuration.
type KubeletFacts struct {
	ConfigPath string `json:"configPath"`
	// ConfigFrom says where ConfigPath came from: "--kubelet-config",
	// "kubelet --config" (the running kubelet's command line) or "default".
	ConfigFrom string `json:"configFrom"`
	// ShutdownGracePeriod and ShutdownGracePeriodCriticalPods as written
	// (Go durations); "" when unset (kubelet's default, 0: the feature is off).
	ShutdownGracePeriod             string `json:"shutdownGracePeriod,omitempty"`
	ShutdownGracePeriodCriticalPods string `json:"shutdownGracePeriodCriticalPods,omitempty"`
	// ByPodPrioritySec is the sum of shutdownGracePeriodByPodPriority's
	// periods, when set (it replaces the two above).
	ByPodPrioritySec int64 `json:"byPodPrioritySec,omitempty"`
	// RequestedSec is the inhibit delay kubelet asks logind for: the
	// by-priority sum, else shutdownGracePeriod.
	RequestedSec float64 `json:"requestedSec"`
	Error        string  `json:"error,omitempty"`
}

// CommandFacts is what the four legacy commands resolve to.
type CommandFacts struct {
	Self string `json:"self"` // this gnsh binary (/proc/self/exe)
	// RootPath is the PATH used for root: $PATH in a root shell (not
	// under sudo), else DefaultRootPath; RootPathFrom says which.
	RootPath     string       `json:"rootPath"`
	RootPathFrom string       `json:"rootPathFrom"` // "$PATH" or "default"
	SecurePath   string       `json:"securePath,omitempty"`
	SudoersErr   string       `json:"sudoersError,omitempty"`
	Root         []Resolution `json:"root"`
	Sudo         []Resolution `json:"sudo,omitempty"` // empty without a secure_path
	// Ansible is the shutdown that ansible.builtin.reboot runs: the first
	// of AnsibleShutdownPath that exists.
	Ansible Resolution `json:"ansible"`
}

// Resolution is one command name looked up in a PATH.
type Resolution struct {
	Name   string `json:"name"`
	Path   string `json:"path,omitempty"`   // the first match in PATH
	Target string `json:"target,omitempty"` // with every symlink resolved
	// Is is "gnsh", "systemctl", "other" or "missing".
	Is    string `json:"is"`
	Error string `json:"error,omitempty"`
}

// KubeconfigFacts is the kubeconfig gnsh would use.
type KubeconfigFacts struct {
	Found bool   `json:"found"`
	Path  string `json:"path,omitempty"`
	Mode  string `json:"mode,omitempty"` // e.g. "0600"
	// Config is gnsh's config file, and ConfigError why it could not be
	// read (the defaults are then used).
	Config      string `json:"config"`
	ConfigError string `json:"configError,omitempty"`
	// ConfigFound: the config file exists (else the defaults apply).
	ConfigFound bool `json:"configFound"`
	// ConfigProblems is every problem of the config file, as gnsh config
	// check says them ("FILE: line N: KEY: problem; fix"), the kubeconfig
	// it names included; none when it cannot be read (ConfigError).
	ConfigProblems []string `json:"configProblems,omitempty"`
	// Named is where a kubeconfig was named, "--kubeconfig" or
	// "kubeconfig in FILE"; "" when it was searched for.
	Named string `json:"named,omitempty"`
	Error string `json:"error,omitempty"`
	// Path above is the drain's kubeconfig. Fallback: it is gnsh's own
	// /etc/gnsh/kubeconfig, for want of the kubelet's (the gate's
	// identity, which this release's rbac.yaml does not let drain).
	Fallback bool `json:"fallback,omitempty"`
	// GateError: the gate's kubeconfig (slots.kubeconfig, or gnsh's own
	// /etc/gnsh/kubeconfig beside the drain's) is there but cannot be
	// used; GateFix how to mend it. A broken one refuses every shutdown
	// through gnsh, as a named kubeconfig does.
	GateError string `json:"gateError,omitempty"`
	GateFix   string `json:"gateFix,omitempty"`
}

// NodeFacts is this machine's Node, when the API server answers.
type NodeFacts struct {
	Name string `json:"name,omitempty"`
	// NameFrom is how the name was found: "--node", "config",
	// "certificate" (the kubelet client certificate's CN) or "hostname".
	NameFrom    string           `json:"nameFrom,omitempty"`
	Found       bool             `json:"found"`
	NotFound    bool             `json:"notFound,omitempty"` // the API server says there is no such Node
	Schedulable *bool            `json:"schedulable,omitempty"`
	Cordon      *drain.Ownership `json:"gnshCordon,omitempty"` // gnsh's record, while its cordon stands
	SameMachine *bool            `json:"sameMachine,omitempty"`
	SameWhy     string           `json:"sameMachineWhy,omitempty"`
	Error       string           `json:"error,omitempty"`
}

// AgentFacts is the node agent: its unit as systemd reports it, and the
// lock it holds while it runs.
type AgentFacts struct {
	Unit string `json:"unit"`
	// ActiveState: "active", "inactive", "failed", … or "unknown" when
	// systemd cannot be asked.
	ActiveState string `json:"activeState"`
	LoadState   string `json:"loadState,omitempty"`
	// UnitFileState is what systemctl is-enabled says: "enabled",
	// "disabled", "masked", …; "" when systemd cannot say.
	UnitFileState string `json:"unitFileState,omitempty"`
	Error         string `json:"error,omitempty"`
	// Lock is what ProbeAgentLock found at LockPath: "held" (an agent
	// runs), "free", "absent", or "" with LockError.
	LockPath  string `json:"lockPath"`
	Lock      string `json:"lock,omitempty"`
	LockError string `json:"lockError,omitempty"`
	// Running: the unit is active (activating, reloading) or an agent
	// holds the lock.
	Running bool `json:"running"`
	// Queued is this node's queued reboot the agent carries (its line,
	// "" for none; root only: the lock directory is root's).
	Queued      string `json:"queued,omitempty"`
	QueuedError string `json:"queuedError,omitempty"`
}

// Logind is the read-only part of the logind client.
type Logind interface {
	InhibitDelayMax(ctx context.Context) (time.Duration, error)
	ListInhibitors(ctx context.Context) ([]handoff.Inhibitor, error)
	ScheduledShutdown(ctx context.Context) (string, uint64, error)
}

// Systemd is the read-only part of PID 1's manager.
type Systemd interface {
	Version(ctx context.Context) (string, error)
	// Unit returns a unit's LoadState and ActiveState.
	Unit(ctx context.Context, name string) (load, active string, err error)
	// UnitFileState returns what systemctl is-enabled says of a unit
	// ("" when there is no unit file).
	UnitFileState(ctx context.Context, name string) (string, error)
}

// Sources is where the facts come from. The zero value reads the real
// machine (with os.Getenv); tests replace any part.
type Sources struct {
	Root   string              // prefix of every file path; "" = /
	Getenv func(string) string // nil = os.Getenv
	// Timeout bounds each D-Bus step; DefaultTimeout if zero.
	Timeout time.Duration
	// DialLogind and DialSystemd connect to the services (the real
	// system bus when nil). close is called when the gathering is done.
	DialLogind  func(ctx context.Context) (l Logind, close func(), err error)
	DialSystemd func(ctx context.Context) (s Systemd, close func(), err error)
	// Self is this gnsh binary (/proc/self/exe when empty); a path on the
	// real file system even when Root is set.
	Self string
	// Euid is the effective user ID (os.Geteuid when nil): $PATH is
	// root's only in a root shell.
	Euid func() int
	// KubeletConfig is kubelet's config file (below Root); if empty, the
	// --config of a running kubelet (/proc/PID/cmdline below Root), else
	// DefaultKubeletConfig.
	KubeletConfig string
	// Kube finds the kubeconfig and reads the Node; see KubeOptions.
	Kube KubeOptions
	// Access: also ask the API server (SelfSubjectAccessReview) whether
	// each request gnsh makes is allowed (gnsh doctor). The API server
	// stores no review, but it is a POST, so gnsh status does not.
	Access bool
}

func (s *Sources) getenv(k string) string {
	if s.Getenv == nil {
		return os.Getenv(k)
	}
	return s.Getenv(k)
}

func (s *Sources) path(p string) string {
	if s.Root == "" {
		return p
	}
	return filepath.Join(s.Root, p)
}

func (s *Sources) timeout() time.Duration {
	if s.Timeout <= 0 {
		return DefaultTimeout
	}
	return s.Timeout
}

// Gather collects every fact. It never fails: each fact carries its own
// error. D-Bus facts and cluster facts are gathered side by side.
func Gather(ctx context.Context, s *Sources) *Report {
	r := &Report{}
	var wg sync.WaitGroup
	wg.Go(func() { gatherSystemd(ctx, s, r) })
	wg.Go(func() { gatherLogind(ctx, s, &r.Logind) })
	if s.Access {
		r.Access = &AccessFacts{}
	}
	wg.Go(func() { gatherKube(ctx, s, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, r.Access) })
	r.LogindConf = ReadLogindConf(s.Root)
	r.Kubelet = readKubelet(s)
	r.Commands = resolveCommands(s)
	r.Install = readInstall(s, s.configPath())
	r.GateToken = readGateToken(s, time.Now())
	wg.Wait()
	r.Agent.LockPath = AgentLockPath
	lock, err := ProbeAgentLock(s.path(AgentLockPath))
	r.Agent.Lock, r.Agent.LockError = lock, errString(err)
	r.Agent.Running = agentRunning(r.Agent)
	if r.Agent.Lock != LockRootOnly {
		qd := &drainer.Drainer{LockDir: filepath.Dir(s.path(AgentLockPath))}
		q, err := qd.PeekQueued()
		r.Agent.QueuedError = errString(err)
		if q != nil {
			r.Agent.Queued = q.Line()
		}
	}
	return r
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
