package logindtest

import (
	"context"
	"encoding/xml"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
)

// D-Bus error names produced by the fakes (sd-bus and logind spellings).
const (
	ErrorUnknownMethod                    = "org.freedesktop.DBus.Error.UnknownMethod"
	ErrorUnknownObject                    = "org.freedesktop.DBus.Error.UnknownObject"
	ErrorUnknownInterface                 = "org.freedesktop.DBus.Error.UnknownInterface"
	ErrorUnknownProperty                  = "org.freedesktop.DBus.Error.UnknownProperty"
	ErrorPropertyReadOnly                 = "org.freedesktop.DBus.Error.PropertyReadOnly"
	ErrorInvalidArgs                      = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrorAccessDenied                     = "org.freedesktop.DBus.Error.AccessDenied"
	ErrorInteractiveAuthorizationRequired = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
	ErrorOperationInProgress              = "org.freedesktop.login1.OperationInProgress"
	ErrorBlockedByInhibitorLock           = "org.freedesktop.login1.BlockedByInhibitorLock"
)

const (
	ifaceIntrospectable = "org.freedesktop.DBus.Introspectable"
	ifaceProperties     = "org.freedesktop.DBus.Properties"
	ifacePeer           = "org.freedesktop.DBus.Peer"
)

// Call is one method call received by a fake, as it was on the wire.
type Call struct {
	Time      time.Time       // from Options.Now when received
	Sender    string          // unique bus name of the caller
	Path      dbus.ObjectPath // object path
	Interface string          // interface header; "" if the caller sent none
	Member    string          // method name
	Signature string          // body signature as sent, e.g. "t" or "st"
	Args      []any           // body as decoded by godbus: uint64 for t, bool for b, dbus.Variant for v
	Flags     dbus.Flags      // header flags
	Error     string          // name of the error sent back; "" if the call succeeded

	serial uint32 // of the call message, to match a later error reply
}

// Interactive reports whether the caller set ALLOW_INTERACTIVE_AUTHORIZATION.
func (c Call) Interactive() bool { return c.Flags&dbus.FlagAllowInteractiveAuthorization != 0 }

// introspection reports whether c is an Introspectable.Introspect call.
func (c Call) introspection() bool {
	return c.Member == "Introspect" && (c.Interface == ifaceIntrospectable || c.Interface == "")
}

// newError returns a D-Bus error with a formatted message.
func newError(name, format string, a ...any) *dbus.Error {
	return dbus.NewError(name, []any{fmt.Sprintf(format, a...)})
}

// A methodDef is a method of an interface. fn runs with service.mu held and
// gets the body already checked against in.
//
// A method that must finish off the read loop (it makes D-Bus calls of its
// own) or must know when its reply has left (it passes a file descriptor)
// sets later instead of fn: later validates the call like fn, with
// service.mu held, and returns a function that completes the call on the
// call's own goroutine, without the lock, and sends the reply itself with
// service.reply or service.replyError.
type methodDef struct {
	name    string
	in, out []introspect.Arg
	fn      func(args []any) ([]any, *dbus.Error)
	later   func(c Call) (func(msg *dbus.Message), *dbus.Error)
}

// A propDef is a property. set is nil for read-only properties and gets a
// value already checked against sig.
type propDef struct {
	name, sig string
	get       func() any
	set       func(v any) *dbus.Error
}

type signalDef struct {
	name string
	args []introspect.Arg
}

type ifaceDef struct {
	name    string
	methods []*methodDef
	props   []*propDef
	signals []*signalDef
}

func (i *ifaceDef) method(name string) *methodDef {
	for _, m := range i.methods {
		if m.name == name {
			return m
		}
	}
	return nil
}

func (i *ifaceDef) prop(name string) *propDef {
	for _, p := range i.props {
		if p.name == name {
			return p
		}
	}
	return nil
}

func in(name, sig string) introspect.Arg {
	return introspect.Arg{Name: name, Type: sig, Direction: "in"}
}

func out(name, sig string) introspect.Arg {
	return introspect.Arg{Name: name, Type: sig, Direction: "out"}
}

func signature(args []introspect.Arg) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a.Type)
	}
	return b.String()
}

// result is the precomputed reply to one method call, or the function that
// completes it (methodDef.later).
type result struct {
	out   []any
	err   *dbus.Error
	later func(msg *dbus.Message)
}

// service is one fake D-Bus service: one connection, one well-known name,
// a fixed set of objects. It answers every method call itself (custom
// dbus.Handler) instead of using godbus's Export, so that it controls
// the introspection data and the error replies exactly.
//
// Calls are processed one at a time in arrival order, like sd-bus does:
// the incoming interceptor, which godbus runs synchronously on its read
// loop, computes the reply, and the handler, which godbus runs on a new
// goroutine per call, only sends it.
type service struct {
	name    string
	objects map[dbus.ObjectPath][]*ifaceDef // immutable after newService
	now     func() time.Time
	onCall  func(Call)
	// onChange, if set, runs with mu held after every call the service
	// handled (the owner's state may have changed).
	onChange func()
	done     chan struct{} // closed by close: background goroutines end

	mu        sync.Mutex // guards everything below and the owner's state
	conn      *dbus.Conn
	errors    map[string]*dbus.Error
	calls     []Call
	pending   map[*dbus.Message]result
	holds     map[string]chan struct{} // member → closed when its replies may go
	closeOnce sync.Once
}

func newService(name string, now func() time.Time, onCall func(Call), errs map[string]*dbus.Error) *service {
	if now == nil {
		now = time.Now
	}
	return &service{
		name:    name,
		objects: make(map[dbus.ObjectPath][]*ifaceDef),
		now:     now,
		onCall:  onCall,
		errors:  maps.Clone(errs),
		pending: make(map[*dbus.Message]result),
		holds:   make(map[string]chan struct{}),
		done:    make(chan struct{}),
	}
}

// start connects to the bus and takes the well-known name.
func (s *service) start(address string) error {
	conn, err := dbus.Connect(address, dbus.WithHandler(handler{s}), dbus.WithIncomingInterceptor(s.intercept))
	if err != nil {
		return fmt.Errorf("fake %s: connect: %w", s.name, err)
	}
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	reply, err := conn.RequestName(s.name, dbus.NameFlagDoNotQueue)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("fake %s: request name: %w", s.name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		_ = conn.Close()
		return fmt.Errorf("fake %s: name already taken", s.name)
	}
	return nil
}

func (s *service) close() error {
	s.closeOnce.Do(func() { close(s.done) })
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn == nil {
		return nil
	}
	return conn.Close()
}

// credentials asks the bus for a peer's UID and PID (what logind gets from
// sd_bus_query_sender_creds). It must not run on the read loop.
func (s *service) credentials(sender string) (uid, pid uint32, err error) {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var creds map[string]dbus.Variant
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionCredentials", 0, sender).Store(&creds); err != nil {
		return 0, 0, fmt.Errorf("credentials of %s: %w", sender, err)
	}
	uid, ok1 := creds["UnixUserID"].Value().(uint32)
	pid, ok2 := creds["ProcessID"].Value().(uint32)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("credentials of %s lack UnixUserID or ProcessID: %v", sender, creds)
	}
	return uid, pid, nil
}

// hold holds the replies to member until the returned function is called.
func (s *service) hold(member string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.holds[member]
	if !ok {
		ch = make(chan struct{})
		s.holds[member] = ch
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.holds[member] == ch {
				delete(s.holds, member)
				close(ch)
			}
		})
	}
}

// waitHold blocks while replies to member are held (or until close).
func (s *service) waitHold(member string) {
	s.mu.Lock()
	ch := s.holds[member]
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-s.done:
		}
	}
}

// reply sends the method return for msg itself (methodDef.later). It
// returns when the message has been written to the socket, so descriptors
// in body may be closed afterwards.
func (s *service) reply(c Call, msg *dbus.Message, body ...any) {
	m := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()),
	}, Body: body}
	if len(body) > 0 {
		m.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(body...))
	}
	s.send(c, m)
}

// replyError sends an error reply for msg itself (methodDef.later).
func (s *service) replyError(c Call, msg *dbus.Message, e *dbus.Error) {
	s.mu.Lock()
	for i := len(s.calls) - 1; i >= 0; i-- {
		if s.calls[i].serial == msg.Serial() && s.calls[i].Sender == c.Sender {
			s.calls[i].Error = e.Name
			break
		}
	}
	s.mu.Unlock()
	m := &dbus.Message{Type: dbus.TypeError, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()),
		dbus.FieldErrorName:   dbus.MakeVariant(e.Name),
	}, Body: e.Body}
	if len(e.Body) > 0 {
		m.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(e.Body...))
	}
	s.send(c, m)
}

func (s *service) send(c Call, m *dbus.Message) {
	if c.Flags&dbus.FlagNoReplyExpected != 0 {
		return
	}
	if c.Sender != "" {
		m.Headers[dbus.FieldDestination] = dbus.MakeVariant(c.Sender)
	}
	s.waitHold(c.Member)
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	// Send writes non-call messages synchronously.
	conn.Send(m, nil)
}

// emit sends a signal; it is called with s.mu held.
func (s *service) emit(path dbus.ObjectPath, iface, member string, args ...any) {
	if s.conn != nil {
		_ = s.conn.Emit(path, iface+"."+member, args...)
	}
}

func (s *service) setError(member string, e *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e == nil {
		delete(s.errors, member)
		return
	}
	if s.errors == nil {
		s.errors = make(map[string]*dbus.Error)
	}
	s.errors[member] = e
}

func (s *service) allCalls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *service) callsWithoutIntrospection() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cs []Call
	for _, c := range s.calls {
		if !c.introspection() {
			cs = append(cs, c)
		}
	}
	return cs
}

func (s *service) intercept(msg *dbus.Message) {
	if msg.Type != dbus.TypeMethodCall {
		return
	}
	if iface, _ := msg.Headers[dbus.FieldInterface].Value().(string); iface == ifacePeer {
		return // godbus answers Ping and GetMachineId itself
	}
	r := s.dispatch(msg)
	if r.later != nil {
		// The call completes itself (methodDef.later): keep godbus from
		// sending a reply of its own once the handler returns. The flag
		// the caller sent is recorded in Call.Flags.
		msg.Flags |= dbus.FlagNoReplyExpected
	}
	s.mu.Lock()
	s.pending[msg] = r
	s.mu.Unlock()
}

// take returns the reply computed by intercept, or computes it now.
func (s *service) take(msg *dbus.Message) result {
	s.mu.Lock()
	r, ok := s.pending[msg]
	delete(s.pending, msg)
	s.mu.Unlock()
	if ok {
		return r
	}
	r = s.dispatch(msg)
	if r.later != nil {
		msg.Flags |= dbus.FlagNoReplyExpected
	}
	return r
}

func (s *service) dispatch(msg *dbus.Message) result {
	h := func(f dbus.HeaderField) any { v := msg.Headers[f]; return v.Value() }
	c := Call{Flags: msg.Flags, Args: slices.Clone(msg.Body), serial: msg.Serial()}
	c.Sender, _ = h(dbus.FieldSender).(string)
	c.Path, _ = h(dbus.FieldPath).(dbus.ObjectPath)
	c.Interface, _ = h(dbus.FieldInterface).(string)
	c.Member, _ = h(dbus.FieldMember).(string)
	if sig, ok := h(dbus.FieldSignature).(dbus.Signature); ok {
		c.Signature = sig.String()
	}

	s.mu.Lock()
	c.Time = s.now()
	out, later, err := s.route(c)
	if err != nil {
		c.Error = err.Name
	}
	s.calls = append(s.calls, c)
	if s.onChange != nil {
		s.onChange()
	}
	hook := s.onCall
	s.mu.Unlock()

	if hook != nil {
		hook(c)
	}
	return result{out: out, err: err, later: later}
}

// route finds and runs the method, with sd-bus's error replies.
func (s *service) route(c Call) ([]any, func(*dbus.Message), *dbus.Error) {
	ifaces, ok := s.objects[c.Path]
	if !ok {
		children := s.children(c.Path)
		if len(children) == 0 {
			return nil, nil, newError(ErrorUnknownObject, "Unknown object '%s'.", c.Path)
		}
		// An intermediate node such as /org/freedesktop: introspection only.
		if c.introspection() {
			if c.Signature != "" {
				return nil, nil, badArgs(c, ifaceIntrospectable, "")
			}
			return []any{s.introspect(c.Path, nil)}, nil, nil
		}
		return nil, nil, unknownMethod(c)
	}

	all := append(s.standard(c.Path, ifaces), ifaces...)
	var iface *ifaceDef
	var m *methodDef
	for _, i := range all {
		if c.Interface != "" && c.Interface != i.name {
			continue
		}
		if m = i.method(c.Member); m != nil {
			iface = i
			break
		}
	}
	if m == nil {
		return nil, nil, unknownMethod(c)
	}
	if want := signature(m.in); c.Signature != want {
		return nil, nil, badArgs(c, iface.name, want)
	}
	if e := s.errors[c.Member]; e != nil {
		return nil, nil, dbus.NewError(e.Name, slices.Clone(e.Body))
	}
	if m.later != nil {
		later, err := m.later(c)
		return nil, later, err
	}
	out, err := m.fn(c.Args)
	return out, nil, err
}

func unknownMethod(c Call) *dbus.Error {
	return newError(ErrorUnknownMethod, "Unknown method %s or interface %s.", c.Member, c.Interface)
}

func badArgs(c Call, iface, want string) *dbus.Error {
	return newError(ErrorInvalidArgs, "Invalid arguments '%s' to call %s.%s(), expecting '%s'.", c.Signature, iface, c.Member, want)
}

// children returns the names of the direct children of path.
func (s *service) children(path dbus.ObjectPath) []string {
	prefix := string(path) + "/"
	if path == "/" {
		prefix = "/"
	}
	set := make(map[string]bool)
	for p := range s.objects {
		if rest, ok := strings.CutPrefix(string(p), prefix); ok && rest != "" {
			name, _, _ := strings.Cut(rest, "/")
			set[name] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// standard returns Introspectable and Properties for an object.
func (s *service) standard(path dbus.ObjectPath, ifaces []*ifaceDef) []*ifaceDef {
	intro := &ifaceDef{name: ifaceIntrospectable, methods: []*methodDef{{
		name: "Introspect",
		out:  []introspect.Arg{out("xml_data", "s")},
		fn:   func([]any) ([]any, *dbus.Error) { return []any{s.introspect(path, ifaces)}, nil },
	}}}
	props := &ifaceDef{
		name: ifaceProperties,
		methods: []*methodDef{
			{
				name: "Get",
				in:   []introspect.Arg{in("interface_name", "s"), in("property_name", "s")},
				out:  []introspect.Arg{out("value", "v")},
				fn: func(a []any) ([]any, *dbus.Error) {
					p, err := findProp(ifaces, a[0].(string), a[1].(string))
					if err != nil {
						return nil, err
					}
					return []any{dbus.MakeVariantWithSignature(p.get(), dbus.ParseSignatureMust(p.sig))}, nil
				},
			},
			{
				name: "GetAll",
				in:   []introspect.Arg{in("interface_name", "s")},
				out:  []introspect.Arg{out("props", "a{sv}")},
				fn: func(a []any) ([]any, *dbus.Error) {
					name := a[0].(string)
					all := make(map[string]dbus.Variant)
					found := name == ""
					for _, i := range ifaces {
						if name != "" && i.name != name {
							continue
						}
						found = true
						for _, p := range i.props {
							all[p.name] = dbus.MakeVariantWithSignature(p.get(), dbus.ParseSignatureMust(p.sig))
						}
					}
					if !found {
						return nil, newError(ErrorUnknownInterface, "Unknown interface '%s'.", name)
					}
					return []any{all}, nil
				},
			},
			{
				name: "Set",
				in:   []introspect.Arg{in("interface_name", "s"), in("property_name", "s"), in("value", "v")},
				fn: func(a []any) ([]any, *dbus.Error) {
					p, err := findProp(ifaces, a[0].(string), a[1].(string))
					if err != nil {
						return nil, err
					}
					if p.set == nil {
						return nil, newError(ErrorPropertyReadOnly, "Property '%s' is not writable.", p.name)
					}
					v := a[2].(dbus.Variant)
					if got := v.Signature().String(); got != p.sig {
						return nil, newError(ErrorInvalidArgs, "Incorrect signature when setting property '%s', expected %s, got %s.", p.name, p.sig, got)
					}
					return nil, p.set(v.Value())
				},
			},
		},
		signals: []*signalDef{{name: "PropertiesChanged", args: []introspect.Arg{
			{Name: "interface_name", Type: "s"}, {Name: "changed_properties", Type: "a{sv}"}, {Name: "invalidated_properties", Type: "as"},
		}}},
	}
	return []*ifaceDef{intro, props}
}

func findProp(ifaces []*ifaceDef, iface, name string) (*propDef, *dbus.Error) {
	for _, i := range ifaces {
		if iface != "" && i.name != iface {
			continue
		}
		if p := i.prop(name); p != nil {
			return p, nil
		}
	}
	return nil, newError(ErrorUnknownProperty, "Unknown interface %s or property %s.", iface, name)
}

// introspect renders the introspection XML of an object: the standard
// interfaces, then ifaces, then child nodes.
func (s *service) introspect(path dbus.ObjectPath, ifaces []*ifaceDef) string {
	node := introspect.Node{Interfaces: []introspect.Interface{introspect.PeerData}}
	if ifaces == nil {
		node.Interfaces = append(node.Interfaces, introspect.IntrospectData)
	} else {
		for _, i := range append(s.standard(path, ifaces), ifaces...) {
			node.Interfaces = append(node.Interfaces, i.introspection())
		}
	}
	for _, c := range s.children(path) {
		node.Children = append(node.Children, introspect.Node{Name: c})
	}
	b, err := xml.MarshalIndent(node, "", " ")
	if err != nil {
		panic(err) // static data; cannot fail
	}
	return strings.TrimSpace(introspect.IntrospectDeclarationString) + "\n" + string(b) + "\n"
}

func (i *ifaceDef) introspection() introspect.Interface {
	x := introspect.Interface{Name: i.name}
	for _, m := range i.methods {
		x.Methods = append(x.Methods, introspect.Method{Name: m.name, Args: slices.Concat(m.in, m.out)})
	}
	for _, sg := range i.signals {
		x.Signals = append(x.Signals, introspect.Signal{Name: sg.name, Args: sg.args})
	}
	for _, p := range i.props {
		access := "read"
		if p.set != nil {
			access = "readwrite"
		}
		x.Properties = append(x.Properties, introspect.Property{Name: p.name, Type: p.sig, Access: access})
	}
	return x
}

// handler hands godbus the replies computed by service.intercept. It
// claims every object, interface and method so that godbus never answers
// on its own (its defaults differ from sd-bus: NoSuchObject, "Unknown /
// invalid method '%s'").
type handler struct{ s *service }

func (h handler) LookupObject(dbus.ObjectPath) (dbus.ServerObject, bool) { return h, true }
func (h handler) LookupInterface(string) (dbus.Interface, bool)          { return h, true }
func (h handler) LookupMethod(string) (dbus.Method, bool)                { return &reply{s: h.s}, true }

// reply is one call in flight. godbus calls DecodeArguments and then Call
// on it, from the goroutine it starts for the call, and sends what they
// return (unless the call completes itself: methodDef.later).
type reply struct {
	s      *service
	r      result
	member string
}

// DecodeArguments implements dbus.ArgumentDecoder; it fetches the reply
// instead of decoding anything, or completes the call.
func (r *reply) DecodeArguments(_ *dbus.Conn, _ string, msg *dbus.Message, _ []any) ([]any, error) {
	r.r = r.s.take(msg)
	r.member, _ = msg.Headers[dbus.FieldMember].Value().(string)
	if r.r.later != nil {
		r.r.later(msg)
		return nil, nil
	}
	r.s.waitHold(r.member)
	if r.r.err != nil {
		return nil, *r.r.err
	}
	return nil, nil
}

func (r *reply) Call(...any) ([]any, error) { return r.r.out, nil }
func (r *reply) NumArguments() int          { return 0 }
func (r *reply) NumReturns() int            { return len(r.r.out) }
func (r *reply) ArgumentValue(int) any      { return nil }
func (r *reply) ReturnValue(int) any        { return nil }
