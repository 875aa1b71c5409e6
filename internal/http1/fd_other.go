//go:build !unix

package http1

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// connAlive cannot peek here: a connection the upstream closed is found
// when it is used (an idempotent call is then retried).
func connAlive(net.Conn) bool { return true }

// rawConn is nil here: every connection goes to net/http's server.
func rawConn(net.Conn) syscall.RawConn { return nil }

func watchFile(net.Conn) (*os.File, error) { return nil, errors.ErrUnsupported }

func waitGone(*os.File) bool { return false }
