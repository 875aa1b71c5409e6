package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/http1"
	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/sdnotify"
)

// serving is the HTTP servers one command runs side by side: servers[i]
// is named names[i] in logs and errors and serves TLS when tlss[i] is set.
type serving struct {
	cmd     string // "serve" or "gateway": prefixes errors
	log     *slog.Logger
	servers []*http.Server
	tlss    []*listen.TLS
	names   []string
	// loops[i], when set, serves listeners[i] in place of servers[i],
	// handing it the connections it does not serve itself (the gateway's
	// plain-HTTP proxy port).
	loops []*http1.Server
}

// add appends a server.
func (s *serving) add(name string, srv *http.Server, tls *listen.TLS) {
	s.servers = append(s.servers, srv)
	s.loops = append(s.loops, nil)
	s.tlss = append(s.tlss, tls)
	s.names = append(s.names, name)
}

// run serves servers[i] on listeners[i] and runs src's refresh loop until
// ctx is done or one of them fails. started, when set, runs once every
// server is serving and may start more work that reports its failure on
// errc. Then run shuts the servers down, giving them shutdown to finish,
// and calls stopping, when set, with the same deadline. A failure is
// returned; ctx ending is not one.
func (s *serving) run(ctx context.Context, src rulestore.Source, listeners []net.Listener, shutdown time.Duration,
	started func(errc chan<- error), stopping func(context.Context)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(s.servers)+1)
	go func() { errc <- src.Run(ctx) }()
	for i, srv := range s.servers {
		s.log.Info("listening", "what", s.names[i], "addr", listeners[i].Addr().String(), "tls", s.tlss[i] != nil)
		serve := srv.Serve
		if s.loops[i] != nil {
			serve = s.loops[i].Serve
		}
		go func() {
			if err := serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %s: %w", s.cmd, s.names[i], err)
			}
		}()
	}
	if started != nil {
		started(errc)
	}
	// SIGHUP is caught before READY=1: from then on a service manager may
	// send it (systemctl reload), and its default action ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if testHookReady != nil {
		testHookReady()
	}
	s.notify(sdnotify.Ready)

	var runErr error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case runErr = <-errc:
			break wait
		case <-hup:
			s.reload(src)
		}
	}
	s.notify(sdnotify.Stopping)
	s.log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), shutdown)
	defer scancel()
	for i, srv := range s.servers {
		if s.loops[i] != nil {
			s.loops[i].Shutdown(sctx) // srv too
			continue
		}
		srv.Shutdown(sctx)
	}
	if stopping != nil {
		stopping(sctx)
	}
	cancel()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

// testHookReady, when set by a test, runs just before READY=1 is sent.
var testHookReady func()

// notify tells the service manager state (systemd's Type=notify: READY=1
// once every listener serves, STOPPING=1 when the drain starts); a failure
// is logged, never fatal.
func (s *serving) notify(state string) {
	if sent, err := sdnotify.Notify(state); err != nil {
		s.log.Warn("cannot notify the service manager", "state", state, "err", err)
	} else if sent {
		s.log.Debug("notified the service manager", "state", state)
	}
}

// reload answers SIGHUP (systemctl reload): a rules file is read again
// now rather than at its next poll. A rules database needs nothing: its
// changes arrive by NOTIFY and every --rules-refresh. TLS certificates
// are reloaded when their files change, signal or not.
func (s *serving) reload(src rulestore.Source) {
	p, ok := src.(interface{ Poll() error })
	if !ok {
		s.log.Info("SIGHUP: the rules database is followed on its own (NOTIFY, --rules-refresh); nothing to reload")
		return
	}
	if err := p.Poll(); err != nil {
		s.log.Warn("SIGHUP: the rules file does not load; the rules in force stay", "err", err)
		return
	}
	s.log.Info("SIGHUP: rules file checked", "revision", src.Current().Revision())
}
