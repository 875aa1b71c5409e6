package cli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/listen"
)

// listenFlags are the flags of how serve's and the gateway's listeners
// face the network: TLS, and the limits on slow and idle clients (see
// internal/listen).
type listenFlags struct {
	tls      listen.TLSFiles // --tls-cert, --tls-key, --tls-client-ca: --listen (and serve's --grpc-listen)
	adminTLS listen.TLSFiles // --admin-tls-cert, --admin-tls-key, --admin-tls-client-ca: --admin-listen
	limits   listen.Limits
}

// addListenFlags registers the listener flags serve and gateway share.
func addListenFlags(fl *pflag.FlagSet, f *listenFlags) {
	fl.StringVar(&f.tls.Cert, "tls-cert", "", "PEM certificate chain: serve --listen and --grpc-listen, or the gateway's --listen, with TLS (needs --tls-key; reloaded when the file changes)")
	fl.StringVar(&f.tls.Key, "tls-key", "", "PEM private key of --tls-cert")
	fl.StringVar(&f.tls.ClientCA, "tls-client-ca", "", "PEM CA certificate(s): the --tls-cert listeners require a client certificate signed by one (mutual TLS)")
	fl.StringVar(&f.adminTLS.Cert, "admin-tls-cert", "", "PEM certificate chain: the admin API (--admin-listen) with TLS (needs --admin-tls-key; reloaded when the file changes)")
	fl.StringVar(&f.adminTLS.Key, "admin-tls-key", "", "PEM private key of --admin-tls-cert")
	fl.StringVar(&f.adminTLS.ClientCA, "admin-tls-client-ca", "", "PEM CA certificate(s): the admin API requires a client certificate signed by one (mutual TLS)")
	d := listen.DefaultLimits()
	fl.DurationVar(&f.limits.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "every listener: how long a client may take to send a request's headers (and the TLS handshake; for gRPC, to set up the connection)")
	fl.DurationVar(&f.limits.BodyTimeout, "body-timeout", d.BodyTimeout, "how long a client may take to send a whole request, body included (the gateway's proxy: see --min-body-rate); for gRPC, the deadline of a call that sets none or a later one")
	fl.DurationVar(&f.limits.IdleTimeout, "idle-timeout", d.IdleTimeout, "every listener: how long a kept-alive connection may wait for its next request (gRPC: a connection with no call in flight)")
	fl.IntVar(&f.limits.MaxHeaderBytes, "max-header-bytes", d.MaxHeaderBytes, "every listener: the largest request headers accepted, in bytes (then 431; gRPC: call metadata)")
}

// validate checks the limits, naming the flag that is wrong.
func (f *listenFlags) validate() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--read-header-timeout", f.limits.ReadHeaderTimeout},
		{"--body-timeout", f.limits.BodyTimeout},
		{"--idle-timeout", f.limits.IdleTimeout},
	} {
		if d.v < time.Millisecond {
			return fmt.Errorf("%s must be at least 1ms, got %s", d.flag, d.v)
		}
	}
	if f.limits.MaxHeaderBytes < 1024 {
		return fmt.Errorf("--max-header-bytes must be at least 1024, got %d", f.limits.MaxHeaderBytes)
	}
	return nil
}

// httpTLS loads the TLS files of an HTTP listener; nil when there are
// none. prefix names the flags ("--tls", "--admin-tls").
func httpTLS(files listen.TLSFiles, prefix string, log *slog.Logger) (*listen.TLS, error) {
	return listen.NewTLS(files, []string{"http/1.1"}, prefix, log)
}

// server returns the http.Server of one listener with the limits: the
// request body must arrive within --body-timeout unless streaming.
func (f *listenFlags) server(addr string, h http.Handler, streaming bool, log *slog.Logger) *http.Server {
	s := f.limits.Server(h, streaming, log)
	s.Addr = addr
	return s
}

// listenOn opens addr, with TLS when t is not nil.
func listenOn(addr string, t *listen.TLS) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil || t == nil {
		return ln, err
	}
	return tls.NewListener(ln, t.Config()), nil
}

// clientTLS returns the TLS configuration of a client of a sluice
// listener: the CA file its certificate is checked against (else the
// system's), and a client certificate for mutual TLS. It is nil when no
// file is given. The flag names are for errors.
func clientTLS(ca, cert, key, caFlag, certFlag, keyFlag string) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caFlag, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", caFlag, ca)
		}
	}
	switch {
	case cert == "" && key == "":
	case cert == "":
		return nil, fmt.Errorf("%s needs %s, the certificate of that key", keyFlag, certFlag)
	case key == "":
		return nil, fmt.Errorf("%s needs %s, the private key of that certificate", certFlag, keyFlag)
	default:
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", certFlag, keyFlag, err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}
