package cli

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// listenSpec is one address a command listens on, with the flag that sets
// it and what it serves.
type listenSpec struct {
	flag, what, addr string
	open             func() (net.Listener, error) // nil: net.Listen("tcp", addr)
}

// listenAll opens every spec's address. When some cannot be opened it
// closes those that could and reports every failure at once, each with
// its flag, so that one start shows all the clashes; the gRPC listener's
// says how to turn it off.
func listenAll(cmd string, specs []listenSpec) ([]net.Listener, error) {
	lns := make([]net.Listener, len(specs))
	var failed []string
	for i, s := range specs {
		open := s.open
		if open == nil {
			open = func() (net.Listener, error) { return net.Listen("tcp", s.addr) }
		}
		ln, err := open()
		if err != nil {
			why := err.Error()
			if errors.Is(err, syscall.EADDRINUSE) {
				why = "address already in use (another sluice, or another program?)"
			}
			name := "--" + s.flag
			if strings.ToUpper(s.flag) == s.flag { // an environment variable
				name = s.flag + "="
			}
			msg := fmt.Sprintf("%s%s (%s): %s", name, s.addr, s.what, why)
			if !strings.HasSuffix(name, "=") {
				msg = fmt.Sprintf("%s %s (%s): %s", name, s.addr, s.what, why)
			}
			if s.flag == "grpc-listen" {
				msg += `; give another address, or --grpc-listen "" to turn gRPC off`
			}
			failed = append(failed, msg)
			continue
		}
		lns[i] = ln
	}
	if len(failed) == 0 {
		return lns, nil
	}
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
	return nil, fmt.Errorf("%s: cannot listen on %d of %d addresses:\n  %s", cmd, len(failed), len(specs), strings.Join(failed, "\n  "))
}
