package redis

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/sluicehq/sluice/internal/rawio"
)

func netDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
}

// dialer returns the client's dial function: nil (the client's own) or,
// when raw is set (Config.RawIO), one that connects to a Redis node as the
// client would by itself and gives a plain TCP connection's reads and
// writes to rawio: they are the store's one system call each way per batch
// of decisions, and on Linux a write the scheduler is told of that runs
// long in the kernel hands its thread's processor over and keeps the
// runtime's monitor awake (see internal/rawio; SLUICE_RAW_IO=0 turns it
// off there). A TLS connection is dialed as the client does.
func dialer(raw bool) func(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
	if !raw {
		return nil
	}
	return func(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		if tc != nil {
			return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", addr)
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return rawio.Conn(c), nil
	}
}
