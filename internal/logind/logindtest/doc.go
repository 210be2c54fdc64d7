// Package logindtest runs fake org.freedesktop.login1 and
// org.freedesktop.systemd1 services on a private dbus-daemon, for tests.
//
// The fakes answer over a real bus, so a test exercises the same wire
// format, signatures and error replies as production code talking to
// systemd-logind. The method, property and signal set follows the
// systemd version chosen in Options.Version (systemd-legacy-commands.md
// §5.1), and so does Introspect, because gnsh decides what logind can do
// by introspection.
//
// A typical test:
//
//	bus := logindtest.StartBus(t) // skips if dbus-daemon is missing
//	ld := bus.StartLogind(t, logindtest.Options{Version: 239})
//	bus.SetSystemBusEnv(t)        // DBUS_SYSTEM_BUS_ADDRESS for code under test
//	… run the code under test …
//	calls := ld.Calls()           // what arrived, with wire signatures and header flags
//
// The fakes never shut anything down: PowerOff, Reboot and Halt only
// record the call, update the state and emit PrepareForShutdown.
//
// Inhibit returns a real descriptor (the write end of a pipe, as logind's
// is the write end of a FIFO); the lock is listed with the caller's UID and
// PID until every copy of it is closed. With Options.WaitForDelayLocks a
// shutdown goes on as logind's does: PrepareForShutdown(true), a wait for
// delay locks bounded by InhibitDelayMax, then State.ShutdownStarted.
// Tests of an inhibitor-holding agent drive it with Logind.Wait (instead
// of sleeping), Options.After (timers they fire themselves),
// EmitPrepareForShutdown, CancelShutdown and HoldReplies.
package logindtest
