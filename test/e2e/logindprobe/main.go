// Command logindprobe exercises internal/logind against a real
// systemd-logind, inside the end-to-end test containers (logind_test.go).
// It never asks for a shutdown: it reads properties, takes a shutdown
// delay lock, follows PrepareForShutdown and, on true, holds the lock for
// -hold and then releases it. With -schedule it first schedules a dry-run
// poweroff an hour away and cancels it, to see whether logind announces
// ScheduledShutdown with PropertiesChanged (a dry run never shuts down).
//
// Every step is one JSON line in -log, with the time, so that the test can
// order the probe's events against the container's exit on one clock.
// It runs until SIGTERM (the shutdown stops its unit) or the bus goes away.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/logind"
)

// Who and Why of the probe's lock; the test looks for them.
const (
	Who = "gnsh-e2e-probe"
	Why = "e2e: hold the shutdown for a moment"
)

type logger struct{ f *os.File }

// log writes one event; each line goes out in one write(2), unbuffered, so
// it survives the container's end.
func (l logger) log(ev string, kv ...any) {
	m := map[string]any{"t": time.Now().UTC().Format(time.RFC3339Nano), "ev": ev}
	for i := 0; i+1 < len(kv); i += 2 {
		m[fmt.Sprint(kv[i])] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	_, _ = l.f.Write(append(b, '\n'))
}

func main() {
	logPath := flag.String("log", "/rig/probe.log", "event log")
	hold := flag.Duration("hold", 2*time.Second, "how long to keep the lock after PrepareForShutdown(true)")
	schedule := flag.Bool("schedule", true, "check whether ScheduledShutdown changes are signalled")
	flag.Parse()
	f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	l := logger{f}
	if err := run(l, *hold, *schedule); err != nil {
		l.log("error", "err", err.Error())
		fmt.Fprintln(os.Stderr, "logindprobe:", err)
		os.Exit(1)
	}
}

func run(l logger, hold time.Duration, schedule bool) error {
	l.log("start", "pid", os.Getpid(), "uid", os.Geteuid())
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	conn, err := logind.Dial(ctx, logind.SystemBusAddress(os.Getenv), false)
	if err != nil {
		return err
	}
	defer conn.Close()
	l.log("conn", "unix_fds", conn.SupportsUnixFDs())
	ld := conn.Logind()

	delay, err := ld.InhibitDelayMax(ctx)
	if err != nil {
		return fmt.Errorf("InhibitDelayMax: %w", err)
	}
	preparing, err := ld.PreparingForShutdown(ctx)
	if err != nil {
		return fmt.Errorf("PreparingForShutdown: %w", err)
	}
	typ, usec, err := ld.ScheduledShutdown(ctx)
	if err != nil {
		return fmt.Errorf("ScheduledShutdown: %w", err)
	}
	l.log("props", "inhibit_delay_max_us", delay.Microseconds(), "preparing", preparing,
		"scheduled_type", typ, "scheduled_usec", fmt.Sprint(usec))

	if schedule {
		if err := scheduleSignal(ctx, l, conn, ld); err != nil {
			return err
		}
	}

	w, err := ld.WatchPrepareForShutdown(ctx)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	lock, err := ld.Inhibit(ctx, "shutdown", Who, Why, "delay")
	if err != nil {
		return fmt.Errorf("Inhibit: %w", err)
	}
	cloexec, _ := closeOnExec(lock)
	l.log("locked", "fd", lock.Fd(), "cloexec", cloexec)
	list, err := ld.ListInhibitors(ctx)
	if err != nil {
		return fmt.Errorf("ListInhibitors: %w", err)
	}
	for _, in := range logind.FindInhibitors(list, "shutdown", "delay", Who) {
		l.log("listed", "what", in.What, "who", in.Who, "why", in.Why, "mode", in.Mode, "uid", in.UID, "lpid", in.PID)
	}
	cancel()
	l.log("ready")

	done := conn.Done()
	for {
		select {
		case start, ok := <-w.C():
			if !ok {
				l.log("watch-end", "err", fmt.Sprint(w.Err()))
				return nil
			}
			l.log("pfs", "start", start)
			if start && lock != nil {
				time.Sleep(hold) // the work an agent would do, e.g. a drain
				l.log("release")
				err := lock.Close()
				lock = nil
				l.log("released", "err", fmt.Sprint(err))
			}
		case <-done:
			l.log("conn-done")
			done = nil
		case s := <-term:
			l.log("signal", "sig", s.String())
			return nil
		}
	}
}

// scheduleSignal schedules a dry-run poweroff an hour away, reads the
// property back, looks for a PropertiesChanged naming ScheduledShutdown,
// and cancels. logind sends a property change before its method reply, so
// a Ping answered after the call shows whether one was sent.
func scheduleSignal(ctx context.Context, l logger, conn *logind.Conn, ld *logind.Logind) error {
	raw, err := dbus.Connect(logind.SystemBusAddress(os.Getenv))
	if err != nil {
		return err
	}
	defer raw.Close()
	if err := raw.AddMatchSignalContext(ctx, dbus.WithMatchSender(logind.Login1Service),
		dbus.WithMatchObjectPath(logind.Login1Path), dbus.WithMatchInterface("org.freedesktop.DBus.Properties"),
		dbus.WithMatchMember("PropertiesChanged")); err != nil {
		return err
	}
	sigs := make(chan *dbus.Signal, 64)
	raw.Signal(sigs)

	at := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := ld.ScheduleShutdown(ctx, "dry-poweroff", at); err != nil {
		return fmt.Errorf("ScheduleShutdown: %w", err)
	}
	typ, usec, err := ld.ScheduledShutdown(ctx)
	if err != nil {
		return err
	}
	if err := raw.Object(logind.Login1Service, logind.Login1Path).CallWithContext(ctx, "org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		return err
	}
	ping := func() error {
		return raw.Object(logind.Login1Service, logind.Login1Path).CallWithContext(ctx, "org.freedesktop.DBus.Peer.Ping", 0).Err
	}
	changed := drainChanged(sigs, "ScheduledShutdown")

	// The control: a block lock changes BlockInhibited, which logind does
	// announce. If this were not seen, "not signalled" would mean nothing.
	ctl, err := ld.Inhibit(ctx, "idle", Who, "control", "block")
	if err != nil {
		return fmt.Errorf("Inhibit (control): %w", err)
	}
	if err := ping(); err != nil {
		return err
	}
	control := drainChanged(sigs, "BlockInhibited")
	_ = ctl.Close()

	if _, err := ld.CancelScheduledShutdown(ctx); err != nil {
		return fmt.Errorf("CancelScheduledShutdown: %w", err)
	}
	typAfter, usecAfter, err := ld.ScheduledShutdown(ctx)
	if err != nil {
		return err
	}
	l.log("schedule", "type", typ, "usec_matches", usec == at, "signalled", changed, "control_signalled", control,
		"after_cancel_type", typAfter, "after_cancel_usec", fmt.Sprint(usecAfter))
	return nil
}

// drainChanged empties sigs and reports whether a PropertiesChanged among
// them named prop, as changed or invalidated.
func drainChanged(sigs chan *dbus.Signal, prop string) bool {
	found := false
	for len(sigs) > 0 {
		s := <-sigs
		if len(s.Body) != 3 {
			continue
		}
		if props, ok := s.Body[1].(map[string]dbus.Variant); ok {
			_, in := props[prop]
			found = found || in
		}
		if inval, ok := s.Body[2].([]string); ok {
			for _, p := range inval {
				found = found || p == prop
			}
		}
	}
	return found
}

func closeOnExec(f *os.File) (bool, error) {
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFD, 0)
	if errno != 0 {
		return false, errno
	}
	return flags&syscall.FD_CLOEXEC != 0, nil
}
