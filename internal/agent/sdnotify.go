package agent

import (
	"net"
	"strings"
)

// Notifier sends sd_notify(3) messages to the service manager: one
// datagram per message to the unix socket named by $NOTIFY_SOCKET (a path,
// or "@name" for an abstract socket). The protocol is small enough that
// gnsh writes it itself rather than pull in a library for one call.
type Notifier struct {
	Socket string // $NOTIFY_SOCKET; "" sends nothing (not run by systemd)
}

// Notify sends state, e.g. "READY=1\nSTATUS=waiting". Without a socket it
// does nothing and returns nil.
func (n Notifier) Notify(state string) error {
	if n.Socket == "" {
		return nil
	}
	name := n.Socket
	if strings.HasPrefix(name, "@") {
		name = "\x00" + name[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}

// Status sends STATUS=line (one line: newlines become spaces).
func (n Notifier) Status(line string) error {
	return n.Notify("STATUS=" + strings.ReplaceAll(line, "\n", " "))
}
