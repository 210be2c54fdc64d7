package logindtest_test

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

// fixture is a private bus with a fake logind and a client connection.
type fixture struct {
	bus    *logindtest.Bus
	logind *logindtest.Logind
	conn   *dbus.Conn
}

func start(t *testing.T, o logindtest.Options) fixture {
	t.Helper()
	bus := logindtest.StartBus(t)
	return fixture{bus: bus, logind: bus.StartLogind(t, o), conn: bus.Connect(t)}
}

func (f fixture) obj() dbus.BusObject {
	return f.conn.Object(logindtest.LogindName, logindtest.LogindPath)
}

// call calls a Manager method and returns the reply error.
func (f fixture) call(member string, args ...any) *dbus.Call {
	return f.obj().Call(logindtest.LogindInterface+"."+member, 0, args...)
}

func (f fixture) prop(t *testing.T, name string) any {
	t.Helper()
	v, err := f.obj().GetProperty(logindtest.LogindInterface + "." + name)
	if err != nil {
		t.Fatalf("Get %s: %v", name, err)
	}
	return v.Value()
}

// errName returns the D-Bus error name of err, or "" for nil.
func errName(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var de dbus.Error
	if !errors.As(err, &de) {
		t.Fatalf("not a dbus.Error: %T %v", err, err)
	}
	return de.Name
}

func wantErr(t *testing.T, err error, name, text string) {
	t.Helper()
	if got := errName(t, err); got != name {
		t.Fatalf("error = %q (%v), want %q", got, err, name)
	}
	if text != "" && err.Error() != text {
		t.Fatalf("error text = %q, want %q", err.Error(), text)
	}
}

func TestBusAddressAndAbsentServices(t *testing.T) {
	bus := logindtest.StartBus(t)
	if !strings.HasPrefix(bus.Address(), "unix:path=") {
		t.Fatalf("Address() = %q", bus.Address())
	}
	conn := bus.Connect(t)
	for _, name := range []string{logindtest.LogindName, logindtest.SystemdName} {
		err := conn.Object(name, "/").Call("org.freedesktop.DBus.Peer.Ping", 0).Err
		wantErr(t, err, "org.freedesktop.DBus.Error.ServiceUnknown", "")
	}
}

// managerMembers lists what the fake's Manager interface offers per version.
var managerMembers = map[int]struct{ methods, props, signals []string }{
	219: {
		methods: []string{"CanPowerOff", "CanReboot", "Inhibit", "ListInhibitors", "PowerOff", "Reboot"},
		props:   []string{"BlockInhibited", "DelayInhibited", "InhibitDelayMaxUSec", "PreparingForShutdown"},
		signals: []string{"PrepareForShutdown"},
	},
	239: {
		methods: []string{"CanHalt", "CanPowerOff", "CanReboot", "CancelScheduledShutdown", "Halt", "Inhibit", "ListInhibitors",
			"PowerOff", "Reboot", "ScheduleShutdown", "SetWallMessage"},
		props: []string{"BlockInhibited", "DelayInhibited", "EnableWallMessages", "InhibitDelayMaxUSec",
			"PreparingForShutdown", "ScheduledShutdown", "WallMessage"},
		signals: []string{"PrepareForShutdown"},
	},
	248: {
		methods: []string{"CanHalt", "CanPowerOff", "CanReboot", "CancelScheduledShutdown", "Halt", "HaltWithFlags",
			"Inhibit", "ListInhibitors", "PowerOff", "PowerOffWithFlags", "Reboot", "RebootWithFlags", "ScheduleShutdown", "SetWallMessage"},
		props: []string{"BlockInhibited", "DelayInhibited", "EnableWallMessages", "InhibitDelayMaxUSec",
			"PreparingForShutdown", "ScheduledShutdown", "WallMessage"},
		signals: []string{"PrepareForShutdown"},
	},
	257: {
		methods: []string{"CanHalt", "CanPowerOff", "CanReboot", "CancelScheduledShutdown", "Halt", "HaltWithFlags",
			"Inhibit", "ListInhibitors", "PowerOff", "PowerOffWithFlags", "Reboot", "RebootWithFlags", "ScheduleShutdown", "SetWallMessage"},
		props: []string{"BlockInhibited", "DelayInhibited", "EnableWallMessages", "InhibitDelayMaxUSec",
			"PreparingForShutdown", "PreparingForShutdownWithMetadata", "ScheduledShutdown", "WallMessage"},
		signals: []string{"PrepareForShutdown", "PrepareForShutdownWithMetadata"},
	},
}

func introspectManager(t *testing.T, f fixture) introspect.Interface {
	t.Helper()
	var s string
	if err := f.obj().Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&s); err != nil {
		t.Fatal(err)
	}
	var node introspect.Node
	if err := xml.Unmarshal([]byte(s), &node); err != nil {
		t.Fatalf("parse introspection: %v\n%s", err, s)
	}
	var names []string
	for _, i := range node.Interfaces {
		names = append(names, i.Name)
	}
	want := []string{"org.freedesktop.DBus.Peer", "org.freedesktop.DBus.Introspectable",
		"org.freedesktop.DBus.Properties", logindtest.LogindInterface}
	if !slices.Equal(names, want) {
		t.Fatalf("interfaces = %v, want %v", names, want)
	}
	return node.Interfaces[3]
}

func TestIntrospectionFollowsVersion(t *testing.T) {
	for _, v := range []int{219, 239, 248, 252, 257} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			f := start(t, logindtest.Options{Version: v})
			want, ok := managerMembers[v]
			if !ok {
				want = managerMembers[248] // 252 adds nothing we emulate over 248
			}
			iface := introspectManager(t, f)
			var methods, props, signals []string
			for _, m := range iface.Methods {
				methods = append(methods, m.Name)
			}
			for _, p := range iface.Properties {
				props = append(props, p.Name)
			}
			for _, s := range iface.Signals {
				signals = append(signals, s.Name)
			}
			slices.Sort(methods)
			slices.Sort(props)
			slices.Sort(signals)
			if !slices.Equal(methods, want.methods) {
				t.Errorf("methods = %v\nwant %v", methods, want.methods)
			}
			if !slices.Equal(props, want.props) {
				t.Errorf("properties = %v\nwant %v", props, want.props)
			}
			if !slices.Equal(signals, want.signals) {
				t.Errorf("signals = %v\nwant %v", signals, want.signals)
			}
			if all := f.logind.AllCalls(); len(all) != 1 || all[0].Member != "Introspect" || len(f.logind.Calls()) != 0 {
				t.Errorf("Introspect recording: all=%v calls=%v", all, f.logind.Calls())
			}
		})
	}
}

func TestIntrospectionArgs(t *testing.T) {
	f := start(t, logindtest.Options{Version: 252})
	iface := introspectManager(t, f)
	sigs := map[string]string{}
	for _, m := range iface.Methods {
		var b strings.Builder
		for _, a := range m.Args {
			fmt.Fprintf(&b, "%s:%s ", a.Direction, a.Type)
		}
		sigs[m.Name] = strings.TrimSpace(b.String())
	}
	for name, want := range map[string]string{
		"PowerOff":                "in:b",
		"RebootWithFlags":         "in:t",
		"ScheduleShutdown":        "in:s in:t",
		"CancelScheduledShutdown": "out:b",
		"SetWallMessage":          "in:s in:b",
		"ListInhibitors":          "out:a(ssssuu)",
		"Inhibit":                 "in:s in:s in:s in:s out:h",
	} {
		if sigs[name] != want {
			t.Errorf("%s args = %q, want %q", name, sigs[name], want)
		}
	}
	for _, p := range iface.Properties {
		if p.Name == "ScheduledShutdown" && (p.Type != "(st)" || p.Access != "read") {
			t.Errorf("ScheduledShutdown = %+v", p)
		}
		if p.Name == "WallMessage" && p.Access != "readwrite" {
			t.Errorf("WallMessage = %+v", p)
		}
	}
}

func TestIntermediateNodesAndUnknownObject(t *testing.T) {
	f := start(t, logindtest.Options{})
	var s string
	if err := f.conn.Object(logindtest.LogindName, "/org/freedesktop").
		Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `<node name="login1">`) {
		t.Errorf("/org/freedesktop introspection lacks login1:\n%s", s)
	}
	err := f.conn.Object(logindtest.LogindName, "/nope").Call(logindtest.LogindInterface+".PowerOff", 0, false).Err
	wantErr(t, err, logindtest.ErrorUnknownObject, "Unknown object '/nope'.")
}

func TestMissingMembersAreUnknownMethod(t *testing.T) {
	for _, tt := range []struct {
		version int
		member  string
		args    []any
	}{
		{219, "Halt", []any{false}},
		{219, "ScheduleShutdown", []any{"poweroff", uint64(1)}},
		{219, "CancelScheduledShutdown", nil},
		{219, "SetWallMessage", []any{"x", true}},
		{239, "RebootWithFlags", []any{uint64(0)}},
		{239, "PowerOffWithFlags", []any{uint64(0)}},
		{252, "NoSuchMethod", nil},
	} {
		t.Run(fmt.Sprintf("%d/%s", tt.version, tt.member), func(t *testing.T) {
			f := start(t, logindtest.Options{Version: tt.version})
			err := f.call(tt.member, tt.args...).Err
			wantErr(t, err, logindtest.ErrorUnknownMethod,
				fmt.Sprintf("Unknown method %s or interface %s.", tt.member, logindtest.LogindInterface))
			if c := f.logind.Calls(); len(c) != 1 || c[0].Error != logindtest.ErrorUnknownMethod {
				t.Errorf("recorded %+v", c)
			}
		})
	}
	t.Run("219/ScheduledShutdown property", func(t *testing.T) {
		f := start(t, logindtest.Options{Version: 219})
		_, err := f.obj().GetProperty(logindtest.LogindInterface + ".ScheduledShutdown")
		wantErr(t, err, logindtest.ErrorUnknownProperty, "")
	})
}

// signals subscribes to the Manager's signals.
func signals(t *testing.T, conn *dbus.Conn) chan *dbus.Signal {
	t.Helper()
	if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(logindtest.LogindPath),
		dbus.WithMatchInterface(logindtest.LogindInterface)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 10)
	conn.Signal(ch)
	return ch
}

func nextSignal(t *testing.T, ch chan *dbus.Signal) *dbus.Signal {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no signal")
		return nil
	}
}

func TestImmediateActions(t *testing.T) {
	for _, tt := range []struct {
		version  int
		member   string
		arg      any
		action   string
		metadata bool
	}{
		{219, "PowerOff", false, "poweroff", false},
		{239, "Reboot", true, "reboot", false},
		{239, "Halt", false, "halt", false},
		{248, "HaltWithFlags", uint64(0), "halt", false},
		{252, "RebootWithFlags", logindtest.FlagRebootViaKexec, "reboot", false}, // kexec not loaded
		{252, "PowerOffWithFlags", logindtest.FlagRootCheckInhibitors, "poweroff", false},
		{257, "RebootWithFlags", uint64(0), "reboot", true},
	} {
		t.Run(fmt.Sprintf("%d/%s", tt.version, tt.member), func(t *testing.T) {
			f := start(t, logindtest.Options{Version: tt.version})
			ch := signals(t, f.conn)
			if err := f.call(tt.member, tt.arg).Err; err != nil {
				t.Fatal(err)
			}
			s := nextSignal(t, ch)
			if tt.metadata {
				if s.Name != logindtest.LogindInterface+".PrepareForShutdownWithMetadata" {
					t.Fatalf("first signal %s, want PrepareForShutdownWithMetadata", s.Name)
				}
				md := s.Body[1].(map[string]dbus.Variant)
				if md["type"].Value() != tt.action {
					t.Errorf("metadata = %v", md)
				}
				s = nextSignal(t, ch)
			}
			if s.Name != logindtest.LogindInterface+".PrepareForShutdown" || s.Path != logindtest.LogindPath ||
				!slices.Equal(s.Body, []any{true}) {
				t.Fatalf("signal = %+v", s)
			}
			st := f.logind.State()
			if !st.PreparingForShutdown || st.Action != tt.action {
				t.Errorf("state = %+v", st)
			}
			if f.prop(t, "PreparingForShutdown") != true {
				t.Error("PreparingForShutdown property not true")
			}
			typ, usec := f.logind.Scheduled()
			if tt.version >= 251 && (typ != tt.action || usec != 0) || tt.version < 251 && typ != "" {
				t.Errorf("Scheduled() = %q, %d", typ, usec)
			}
			err := f.call(tt.member, tt.arg).Err
			wantErr(t, err, logindtest.ErrorOperationInProgress, "There's already a shutdown or sleep operation in progress")
		})
	}
}

func TestKexecAndSoftReboot(t *testing.T) {
	f := start(t, logindtest.Options{Version: 252, KexecLoaded: true})
	if err := f.call("RebootWithFlags", logindtest.FlagRebootViaKexec).Err; err != nil {
		t.Fatal(err)
	}
	if st := f.logind.State(); st.Action != "kexec" || st.ScheduledType != "kexec" {
		t.Errorf("state = %+v", st)
	}
	f = start(t, logindtest.Options{Version: 257})
	if err := f.call("RebootWithFlags", logindtest.FlagSoftReboot).Err; err != nil {
		t.Fatal(err)
	}
	if st := f.logind.State(); st.Action != "soft-reboot" {
		t.Errorf("state = %+v", st)
	}
}

func TestFlagValidation(t *testing.T) {
	const invalid = "Invalid flags parameter"
	for _, tt := range []struct {
		version int
		member  string
		flags   uint64
		text    string // "" means accepted
	}{
		{248, "RebootWithFlags", logindtest.FlagRootCheckInhibitors, ""},
		{248, "RebootWithFlags", logindtest.FlagRebootViaKexec, invalid}, // RHEL 8.5: flag 0x1 only
		{252, "RebootWithFlags", logindtest.FlagRebootViaKexec | logindtest.FlagRootCheckInhibitors, ""},
		{252, "PowerOffWithFlags", logindtest.FlagRebootViaKexec, "Reboot via kexec is only applicable with reboot operations"},
		{257, "HaltWithFlags", logindtest.FlagRebootViaKexec, "Reboot via kexec option is only applicable with reboot operations"},
		{252, "HaltWithFlags", logindtest.FlagSoftReboot, invalid},
		{257, "HaltWithFlags", logindtest.FlagSoftReboot, "Soft reboot option is only applicable with reboot operations"},
		{257, "RebootWithFlags", logindtest.FlagSoftReboot | logindtest.FlagRebootViaKexec,
			"Both reboot via kexec and soft reboot selected, which is not supported"},
		{252, "PowerOffWithFlags", 1 << 63, invalid}, // SD_LOGIND_INTERACTIVE is internal
		{252, "PowerOffWithFlags", 1 << 10, invalid},
		{252, "PowerOffWithFlags", logindtest.FlagSkipInhibitors, invalid},
		{257, "PowerOffWithFlags", logindtest.FlagSkipInhibitors, ""},
	} {
		t.Run(fmt.Sprintf("%d/%s/%#x", tt.version, tt.member, tt.flags), func(t *testing.T) {
			f := start(t, logindtest.Options{Version: tt.version})
			err := f.call(tt.member, tt.flags).Err
			if tt.text == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			wantErr(t, err, logindtest.ErrorInvalidArgs, tt.text)
			if f.logind.State().PreparingForShutdown {
				t.Error("rejected call changed state")
			}
		})
	}
}

func TestScheduleShutdown(t *testing.T) {
	for _, tt := range []struct {
		version int
		typ     string
		text    string // error text; "" means accepted
		stored  string
		dry     bool
	}{
		{239, "poweroff", "", "poweroff", false},
		{239, "dry-reboot", "", "reboot", true},
		{239, "kexec", "Unsupported shutdown type", "", false},
		{248, "dry-kexec", "Unsupported shutdown type", "", false},
		{252, "kexec", "", "kexec", false},
		{252, "dry-halt", "", "halt", true},
		{252, "soft-reboot", "Unsupported shutdown type", "", false},
		{252, "suspend", "Unsupported shutdown type", "", false},
		{257, "soft-reboot", "", "soft-reboot", false},
		{257, "dry-bogus", "Unsupported shutdown type: bogus", "", false},
	} {
		t.Run(fmt.Sprintf("%d/%s", tt.version, tt.typ), func(t *testing.T) {
			f := start(t, logindtest.Options{Version: tt.version})
			const usec = uint64(1_700_000_000_000_000)
			err := f.call("ScheduleShutdown", tt.typ, usec).Err
			if tt.text != "" {
				wantErr(t, err, logindtest.ErrorInvalidArgs, tt.text)
				if typ, _ := f.logind.Scheduled(); typ != "" {
					t.Errorf("rejected type stored %q", typ)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if typ, u := f.logind.Scheduled(); typ != tt.stored || u != usec || f.logind.State().DryRun != tt.dry {
				t.Errorf("Scheduled() = %q, %d, state %+v", typ, u, f.logind.State())
			}
			got := f.prop(t, "ScheduledShutdown").([]any)
			if !slices.Equal(got, []any{tt.stored, usec}) {
				t.Errorf("ScheduledShutdown property = %#v", got)
			}
		})
	}
}

func TestScheduleReplaceAndCancel(t *testing.T) {
	f := start(t, logindtest.Options{Version: 239})
	var cancelled bool
	if err := f.call("CancelScheduledShutdown").Store(&cancelled); err != nil || cancelled {
		t.Fatalf("cancel with nothing scheduled: %v, %v", cancelled, err)
	}
	for _, a := range []struct {
		typ  string
		usec uint64
	}{{"dry-poweroff", 10}, {"reboot", 20}} {
		if err := f.call("ScheduleShutdown", a.typ, a.usec).Err; err != nil {
			t.Fatal(err)
		}
	}
	if st := f.logind.State(); st.ScheduledType != "reboot" || st.ScheduledUSec != 20 || st.DryRun {
		t.Fatalf("second ScheduleShutdown did not replace the first: %+v", st)
	}
	if err := f.call("CancelScheduledShutdown").Store(&cancelled); err != nil || !cancelled {
		t.Fatalf("cancel: %v, %v", cancelled, err)
	}
	if typ, usec := f.logind.Scheduled(); typ != "" || usec != 0 {
		t.Errorf("after cancel Scheduled() = %q, %d", typ, usec)
	}
	if got := f.prop(t, "ScheduledShutdown").([]any); !slices.Equal(got, []any{"", uint64(0)}) {
		t.Errorf("ScheduledShutdown property = %#v", got)
	}
}

func TestScheduleFile(t *testing.T) {
	for _, v := range []int{247, 252} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "systemd", "shutdown", "scheduled")
			f := start(t, logindtest.Options{Version: v, ScheduleFile: path})
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("file before any schedule: %v", err)
			}
			if err := f.call("ScheduleShutdown", "dry-reboot", uint64(1_700_000_000_000_000)).Err; err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != "USEC=1700000000000000\nWARN_WALL=0\nMODE=reboot\n" {
				t.Fatalf("file %q, %v", b, err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode() != 0o644 {
				t.Errorf("file mode: %v, %v", fi, err)
			}
			if err := f.call("CancelScheduledShutdown").Err; err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("file after the cancel: %v", err)
			}
			// An immediate action resets the schedule from v251 on.
			if err := f.call("ScheduleShutdown", "poweroff", uint64(1_700_000_000_000_000)).Err; err != nil {
				t.Fatal(err)
			}
			if err := f.call("PowerOff", false).Err; err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); (v >= 251) != os.IsNotExist(err) {
				t.Errorf("file after an immediate poweroff: %v", err)
			}
		})
	}
}

func TestWallMessageAndProperties(t *testing.T) {
	f := start(t, logindtest.Options{Version: 252, InhibitDelayMax: 3 * time.Second})
	if err := f.call("SetWallMessage", "maintenance", true).Err; err != nil {
		t.Fatal(err)
	}
	if f.prop(t, "WallMessage") != "maintenance" || f.prop(t, "EnableWallMessages") != true {
		t.Error("SetWallMessage not reflected in properties")
	}
	if err := f.obj().SetProperty(logindtest.LogindInterface+".EnableWallMessages", dbus.MakeVariant(false)); err != nil {
		t.Fatal(err)
	}
	if st := f.logind.State(); st.WallMessage != "maintenance" || st.EnableWallMessages {
		t.Errorf("state = %+v", st)
	}
	err := f.obj().SetProperty(logindtest.LogindInterface+".PreparingForShutdown", dbus.MakeVariant(true))
	wantErr(t, err, logindtest.ErrorPropertyReadOnly, "Property 'PreparingForShutdown' is not writable.")
	err = f.obj().SetProperty(logindtest.LogindInterface+".WallMessage", dbus.MakeVariant(true))
	wantErr(t, err, logindtest.ErrorInvalidArgs, "")
	_, err = f.obj().GetProperty(logindtest.LogindInterface + ".Nope")
	wantErr(t, err, logindtest.ErrorUnknownProperty, "")

	// Read the body directly: godbus's Store into map[string]dbus.Variant
	// re-wraps the values and loses their wire signatures ("(st)" → "av").
	c := f.obj().Call("org.freedesktop.DBus.Properties.GetAll", 0, logindtest.LogindInterface)
	if c.Err != nil {
		t.Fatal(c.Err)
	}
	all := c.Body[0].(map[string]dbus.Variant)
	if all["InhibitDelayMaxUSec"].Value() != uint64(3_000_000) || all["ScheduledShutdown"].Signature().String() != "(st)" {
		t.Errorf("GetAll = %v (ScheduledShutdown signature %s)", all, all["ScheduledShutdown"].Signature())
	}
}

func TestInhibitors(t *testing.T) {
	inhibitors := []logindtest.Inhibitor{
		{What: "shutdown:sleep", Who: "backup", Why: "copying", Mode: "block", UID: 1000, PID: 42},
		{What: "shutdown", Who: "kubelet", Why: "drain", Mode: "delay", UID: 0, PID: 7},
	}
	f := start(t, logindtest.Options{Version: 252, Inhibitors: inhibitors})
	var got []logindtest.Inhibitor
	if err := f.call("ListInhibitors").Store(&got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, inhibitors) {
		t.Errorf("ListInhibitors = %+v", got)
	}
	if f.prop(t, "BlockInhibited") != "shutdown:sleep" || f.prop(t, "DelayInhibited") != "shutdown" {
		t.Error("BlockInhibited/DelayInhibited wrong")
	}
	err := f.call("RebootWithFlags", logindtest.FlagRootCheckInhibitors).Err
	wantErr(t, err, logindtest.ErrorAccessDenied, "Access denied to root due to active block inhibitor")
	if err := f.call("RebootWithFlags", uint64(0)).Err; err != nil {
		t.Fatalf("root without ROOT_CHECK_INHIBITORS: %v", err)
	}

	f = start(t, logindtest.Options{Version: 257, Inhibitors: inhibitors})
	err = f.call("PowerOff", false).Err
	wantErr(t, err, logindtest.ErrorAccessDenied, "Access denied due to active block inhibitor")
	err = f.call("ScheduleShutdown", "poweroff", uint64(1)).Err
	wantErr(t, err, logindtest.ErrorAccessDenied, "")
	if err := f.call("PowerOffWithFlags", logindtest.FlagSkipInhibitors).Err; err != nil {
		t.Fatalf("SKIP_INHIBITORS: %v", err)
	}
}

func TestSignatureAndFlagsRecording(t *testing.T) {
	f := start(t, logindtest.Options{Version: 252})
	// A client passing int64 instead of uint64 microseconds.
	err := f.call("ScheduleShutdown", "reboot", time.Now().UnixMicro()).Err
	wantErr(t, err, logindtest.ErrorInvalidArgs,
		"Invalid arguments 'sx' to call org.freedesktop.login1.Manager.ScheduleShutdown(), expecting 'st'.")
	if err := f.call("ScheduleShutdown", "reboot", uint64(5)).Err; err != nil {
		t.Fatal(err)
	}
	// godbus's BusObject.Call drops FlagAllowInteractiveAuthorization
	// (object.go masks flags to NoAutoStart|NoReplyExpected), so send a
	// raw message to check that the fake records header flags.
	msg := &dbus.Message{
		Type:  dbus.TypeMethodCall,
		Flags: dbus.FlagAllowInteractiveAuthorization,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldDestination: dbus.MakeVariant(logindtest.LogindName),
			dbus.FieldPath:        dbus.MakeVariant(logindtest.LogindPath),
			dbus.FieldInterface:   dbus.MakeVariant(logindtest.LogindInterface),
			dbus.FieldMember:      dbus.MakeVariant("RebootWithFlags"),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(uint64(0))),
		},
		Body: []any{uint64(0)},
	}
	if err := (<-f.conn.Send(msg, nil).Done).Err; err != nil {
		t.Fatal(err)
	}

	calls := f.logind.Calls()
	if len(calls) != 3 {
		t.Fatalf("calls = %+v", calls)
	}
	bad, good, flagged := calls[0], calls[1], calls[2]
	if bad.Signature != "sx" || bad.Error != logindtest.ErrorInvalidArgs {
		t.Errorf("bad call recorded as %+v", bad)
	}
	if good.Signature != "st" || good.Error != "" || good.Interface != logindtest.LogindInterface ||
		good.Path != logindtest.LogindPath || good.Sender != f.conn.Names()[0] {
		t.Errorf("good call recorded as %+v", good)
	}
	if _, ok := good.Args[1].(uint64); !ok {
		t.Errorf("usec arg is %T", good.Args[1])
	}
	if good.Interactive() || !flagged.Interactive() {
		t.Errorf("interactive flags: %v %v", good.Flags, flagged.Flags)
	}
}

func TestErrorInjection(t *testing.T) {
	denied := dbus.NewError(logindtest.ErrorAccessDenied, []any{"Access denied"})
	f := start(t, logindtest.Options{Version: 252, Errors: map[string]*dbus.Error{
		"RebootWithFlags":  denied,
		"ScheduleShutdown": dbus.NewError(logindtest.ErrorInvalidArgs, []any{"nope"}),
		"Halt":             denied,
	}})
	wantErr(t, f.call("RebootWithFlags", uint64(0)).Err, logindtest.ErrorAccessDenied, "Access denied")
	wantErr(t, f.call("ScheduleShutdown", "reboot", uint64(1)).Err, logindtest.ErrorInvalidArgs, "nope")
	// The signature is checked before the injected error.
	wantErr(t, f.call("Halt", "x").Err, logindtest.ErrorInvalidArgs, "")
	if st := f.logind.State(); st.PreparingForShutdown || st.ScheduledType != "" {
		t.Errorf("failed calls changed state: %+v", st)
	}
	f.logind.SetError("RebootWithFlags", nil)
	if err := f.call("RebootWithFlags", uint64(0)).Err; err != nil {
		t.Fatal(err)
	}
	f.logind.SetError("CancelScheduledShutdown", denied)
	wantErr(t, f.call("CancelScheduledShutdown").Err, logindtest.ErrorAccessDenied, "")

	// Missing members stay UnknownMethod even with an injected error.
	f = start(t, logindtest.Options{Version: 219, Errors: map[string]*dbus.Error{"Halt": denied}})
	wantErr(t, f.call("Halt", false).Err, logindtest.ErrorUnknownMethod, "")
}

func TestCallsKeepArrivalOrder(t *testing.T) {
	f := start(t, logindtest.Options{Version: 252})
	var pending []*dbus.Call
	for i := range 50 {
		pending = append(pending, f.obj().Go(logindtest.LogindInterface+".SetWallMessage", 0, nil, fmt.Sprint(i), true))
	}
	for _, c := range pending {
		<-c.Done
		if c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	calls := f.logind.Calls()
	for i, c := range calls {
		if c.Args[0] != fmt.Sprint(i) {
			t.Fatalf("call %d has arg %v", i, c.Args[0])
		}
	}
	if st := f.logind.State(); st.WallMessage != "49" {
		t.Errorf("last applied wall message %q", st.WallMessage)
	}
}

func TestOnCallAndNow(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	seen := make(chan logindtest.Call, 1)
	f := start(t, logindtest.Options{Now: func() time.Time { return now }, OnCall: func(c logindtest.Call) { seen <- c }})
	if err := f.call("PowerOff", false).Err; err != nil {
		t.Fatal(err)
	}
	c := <-seen
	if c.Member != "PowerOff" || !c.Time.Equal(now) {
		t.Errorf("OnCall got %+v", c)
	}
}

func TestNameTaken(t *testing.T) {
	bus := logindtest.StartBus(t)
	bus.StartLogind(t, logindtest.Options{})
	if _, err := logindtest.NewLogind(bus.Address(), logindtest.Options{}); err == nil {
		t.Fatal("second fake logind on the same bus succeeded")
	}
}

func TestSetSystemBusEnv(t *testing.T) {
	bus := logindtest.StartBus(t)
	bus.StartLogind(t, logindtest.Options{Version: 239})
	bus.SetSystemBusEnv(t)
	conn, err := dbus.SystemBusPrivate()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Auth(nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Hello(); err != nil {
		t.Fatal(err)
	}
	var can string
	if err := conn.Object(logindtest.LogindName, logindtest.LogindPath).
		Call(logindtest.LogindInterface+".CanHalt", 0).Store(&can); err != nil || can != "yes" {
		t.Fatalf("CanHalt via DBUS_SYSTEM_BUS_ADDRESS = %q, %v", can, err)
	}
}
