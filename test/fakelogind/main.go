// Command fakelogind serves a fake org.freedesktop.login1 (and
// org.freedesktop.systemd1) on a D-Bus bus, for manual and shell tests.
// It never shuts anything down.
//
// Usage:
//
//	fakelogind [--address ADDR] [--version N] [--log FILE] [--no-systemd] [--error MEMBER=NAME[:TEXT]]...
//
// Without --address it starts a private dbus-daemon. Once the services
// are on the bus it prints the bus address on one line; point the code
// under test at it with DBUS_SYSTEM_BUS_ADDRESS. With --log, every call
// received is appended to FILE as one JSON object per line. It runs until
// SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fakelogind:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("fakelogind", flag.ContinueOnError)
	address := fs.String("address", "", "bus address to serve on (default: start a private dbus-daemon)")
	version := fs.Int("version", logindtest.DefaultVersion, "systemd version to emulate")
	logPath := fs.String("log", "", "append a JSON line per received call to this file")
	noSystemd := fs.Bool("no-systemd", false, "do not serve org.freedesktop.systemd1")
	errs := map[string]*dbus.Error{}
	fs.Func("error", "reply MEMBER with error NAME (and TEXT) instead; repeatable, applies to both services", func(s string) error {
		member, rest, ok := strings.Cut(s, "=")
		name, text, _ := strings.Cut(rest, ":")
		if !ok || member == "" || name == "" {
			return errors.New("want MEMBER=NAME[:TEXT]")
		}
		errs[member] = dbus.NewError(name, []any{text})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}

	var onCall func(logindtest.Call)
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		onCall = jsonLogger(f)
	}

	if *address == "" {
		bus, err := logindtest.NewBus()
		if err != nil {
			return err
		}
		defer bus.Close()
		*address = bus.Address()
	}
	ld, err := logindtest.NewLogind(*address, logindtest.Options{Version: *version, Errors: errs, OnCall: onCall})
	if err != nil {
		return err
	}
	defer ld.Close()
	if !*noSystemd {
		sd, err := logindtest.NewSystemd(*address, logindtest.SystemdOptions{Version: *version, Errors: errs, OnCall: onCall})
		if err != nil {
			return err
		}
		defer sd.Close()
	}

	fmt.Fprintln(stdout, *address)
	<-ctx.Done()
	return nil
}

// jsonLogger returns an OnCall hook writing one JSON object per call.
func jsonLogger(w io.Writer) func(logindtest.Call) {
	var mu sync.Mutex // logind and systemd1 call it from their own goroutines
	enc := json.NewEncoder(w)
	return func(c logindtest.Call) {
		args := make([]any, len(c.Args))
		for i, a := range c.Args {
			if v, ok := a.(dbus.Variant); ok {
				a = v.Value()
			}
			args[i] = a
		}
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(struct {
			Time        string `json:"time"`
			Sender      string `json:"sender"`
			Path        string `json:"path"`
			Interface   string `json:"interface"`
			Member      string `json:"member"`
			Signature   string `json:"signature"`
			Args        []any  `json:"args"`
			Flags       uint8  `json:"flags"`
			Interactive bool   `json:"interactive"`
			Error       string `json:"error,omitempty"`
		}{
			c.Time.Format("2006-01-02T15:04:05.000000Z07:00"), c.Sender, string(c.Path), c.Interface, c.Member,
			c.Signature, args, uint8(c.Flags), c.Interactive(), c.Error,
		})
	}
}
