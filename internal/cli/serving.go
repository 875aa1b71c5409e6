package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/http1"
	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/rulestore"
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

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
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
