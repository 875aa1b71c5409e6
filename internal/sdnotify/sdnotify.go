// Package sdnotify tells the service manager that started the process
// (systemd, with Type=notify) about its state: the sd_notify protocol, one
// datagram of "KEY=value" lines to the unix socket named by $NOTIFY_SOCKET.
// Without that variable it does nothing.
package sdnotify

import (
	"fmt"
	"net"
	"os"
)

// The states sluice reports (sd_notify(3)).
const (
	Ready    = "READY=1"    // every listener is serving
	Stopping = "STOPPING=1" // shutting down: draining the calls in flight
)

// Notify sends state to $NOTIFY_SOCKET and reports whether it was sent:
// false with a nil error when the variable is not set (not started by a
// service manager that listens). A name starting with "@" is an abstract
// socket.
func Notify(state string) (bool, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return false, nil
	}
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	return true, nil
}
