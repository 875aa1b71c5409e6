package listen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// TLSFiles names the PEM files of one listener's TLS: its certificate
// chain and private key, and, for mutual TLS, the CA certificates a client
// certificate must chain to. The zero value is plain TCP.
type TLSFiles struct {
	Cert     string // certificate chain, leaf first
	Key      string // the leaf's private key
	ClientCA string // when set, every client must present a certificate signed by one of these CAs
}

// Enabled reports whether TLS is configured.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// TLS keeps a listener's certificate, key and client CAs in step with their
// files: every handshake stats the files (three stat calls, no read) and,
// when one changed since it was loaded, loads them again, so a renewed
// certificate is served from the next handshake on, without a restart.
// Connections already open keep the certificate they were made with. A
// change that does not load (a certificate without its new key yet, say)
// is logged once and the last good files stay in force; it is tried again
// when the files change again. Safe for concurrent use; make it with
// NewTLS.
type TLS struct {
	files      TLSFiles
	nextProtos []string
	log        *slog.Logger

	cur atomic.Pointer[tlsState] // the files in force

	mu     sync.Mutex // serialises loads
	failed stamps     // the stamps of the last load that failed
}

type tlsState struct {
	stamps stamps
	cfg    *tls.Config
}

// stamp is what a stat says of one file: a changed file has a new one.
type stamp struct {
	mod  time.Time
	size int64
}

type stamps [3]stamp // Cert, Key, ClientCA

// NewTLS loads files and returns the TLS that serves them with the given
// ALPN protocols ("h2" for gRPC, "http/1.1" for HTTP), or nil when files
// is the zero value (plain TCP). flagPrefix names the flags the files come
// from in errors ("--tls" for --tls-cert, --tls-key, --tls-client-ca).
// Reload failures are logged to log.
func NewTLS(files TLSFiles, nextProtos []string, flagPrefix string, log *slog.Logger) (*TLS, error) {
	switch {
	case !files.Enabled():
		return nil, nil
	case files.Cert == "" && files.Key == "":
		return nil, fmt.Errorf("listen: %s-client-ca needs %s-cert and %s-key: mutual TLS is TLS first", flagPrefix, flagPrefix, flagPrefix)
	case files.Cert == "":
		return nil, fmt.Errorf("listen: %s-key needs %s-cert, the certificate of that key", flagPrefix, flagPrefix)
	case files.Key == "":
		return nil, fmt.Errorf("listen: %s-cert needs %s-key, the private key of that certificate", flagPrefix, flagPrefix)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &TLS{files: files, nextProtos: slices.Clone(nextProtos), log: log}
	st, err := t.load()
	if err != nil {
		return nil, fmt.Errorf("listen: %s-cert, %s-key, %s-client-ca: %w", flagPrefix, flagPrefix, flagPrefix, err)
	}
	t.cur.Store(st)
	return t, nil
}

// Config returns the server-side tls.Config: each handshake gets the
// files' current configuration (see TLS).
func (t *TLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         slices.Clone(t.nextProtos),
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return t.current(), nil },
	}
}

// current returns the configuration of the files as they are now,
// loading them again when they changed.
func (t *TLS) current() *tls.Config {
	st := t.cur.Load()
	now, err := t.stat()
	if err != nil || now == st.stamps {
		return st.cfg // a file that vanished for a moment: keep serving
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st = t.cur.Load(); now == st.stamps || now == t.failed {
		return st.cfg
	}
	next, err := t.load()
	if err != nil {
		t.failed = now
		t.log.Error("listen: the changed TLS files do not load; the previous certificate stays in force until they are fixed",
			"cert", t.files.Cert, "key", t.files.Key, "client_ca", t.files.ClientCA, "err", err)
		return st.cfg
	}
	t.cur.Store(next)
	t.log.Info("listen: TLS files reloaded", "cert", t.files.Cert, "not_after", next.cfg.Certificates[0].Leaf.NotAfter)
	return next.cfg
}

func (t *TLS) stat() (stamps, error) {
	var s stamps
	for i, p := range [...]string{t.files.Cert, t.files.Key, t.files.ClientCA} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return s, err
		}
		s[i] = stamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return s, nil
}

// load reads the files. The stamps are taken first, so that a file
// changed while it is read is read again at the next handshake.
func (t *TLS) load() (*tlsState, error) {
	s, err := t.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(t.files.Cert, t.files.Key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   slices.Clone(t.nextProtos),
	}
	if t.files.ClientCA != "" {
		pem, err := os.ReadFile(t.files.ClientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New(t.files.ClientCA + ": no PEM certificate in it")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return &tlsState{stamps: s, cfg: cfg}, nil
}
