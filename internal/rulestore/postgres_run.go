package rulestore

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// NotifyChannel is the PostgreSQL channel every change is announced on
// (NOTIFY sluice_rules, '<revision>'), inside the transaction that makes it.
const NotifyChannel = "sluice_rules"

// Run listens for change notifications (unless NoNotify) and refreshes
// every RefreshInterval and on every notification, until ctx is done
// (returning ctx.Err()) or the store is closed (returning nil). While the
// database is unreachable it keeps trying; see the type's doc.
func (p *Postgres) Run(ctx context.Context) error {
	p.runMu.Lock()
	if p.closed {
		p.runMu.Unlock()
		return nil
	}
	p.wg.Add(1)
	p.runMu.Unlock()
	defer p.wg.Done()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-rctx.Done():
		}
	}()
	kick := make(chan struct{}, 1)
	var lwg sync.WaitGroup
	if p.notify {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			p.listen(rctx, kick)
		}()
	}
	c, stop := p.tick(p.refresh)
	defer stop()
	var force bool
	for {
		select {
		case <-rctx.Done():
			cancel()
			lwg.Wait()
			return ctx.Err()
		case <-c:
			force = false
		case <-kick:
			force = true
		}
		rf, rcancel := context.WithTimeout(rctx, p.writeTO)
		_ = p.refreshNow(rf, force) // problems are logged and kept in Status
		rcancel()
	}
}

// Backoff of the listener's reconnections.
const (
	minListenBackoff = 100 * time.Millisecond
	maxListenBackoff = 3 * time.Second
)

// listen keeps a connection LISTENing on NotifyChannel and kicks a refresh
// on every notification of a revision other than the one in force, and
// after every (re)connection, since notifications sent meanwhile are lost.
// It reconnects with exponential backoff until ctx is done.
func (p *Postgres) listen(ctx context.Context, kick chan<- struct{}) {
	backoff := minListenBackoff
	lost := false
	for {
		err := p.listenOnce(ctx, kick, func() {
			backoff = minListenBackoff
			if lost {
				p.log.Info("rulestore: listening for rule changes again", "database", p.loc, "channel", NotifyChannel)
				lost = false
			}
		})
		if ctx.Err() != nil {
			return
		}
		if !lost {
			p.log.Warn("rulestore: lost the rule change notifications; reconnecting (the refresh keeps rules current meanwhile)",
				"database", p.loc, "error", err)
			lost = true
		}
		select {
		case <-ctx.Done():
			return
		case <-p.after(backoff):
		}
		backoff = min(backoff*2, maxListenBackoff)
	}
}

// listenOnce connects, LISTENs, calls listening, and waits for
// notifications until the connection fails or ctx is done. An idle
// connection is pinged every RefreshInterval, so that a dead one is found.
func (p *Postgres) listenOnce(ctx context.Context, kick chan<- struct{}, listening func()) error {
	cctx, cancel := context.WithTimeout(ctx, p.connTO)
	conn, err := pgx.ConnectConfig(cctx, p.connCfg.Copy())
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	listening()
	kickNow(kick)
	for {
		wctx, cancel := context.WithTimeout(ctx, p.refresh)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			rev, perr := strconv.ParseInt(n.Payload, 10, 64)
			if perr != nil || rev != p.Current().Revision() {
				kickNow(kick)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case pgconn.Timeout(err):
			pctx, cancel := context.WithTimeout(ctx, p.connTO)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// kickNow asks Run for a refresh; one pending request is enough.
func kickNow(kick chan<- struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}
