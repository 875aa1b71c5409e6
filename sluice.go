// Package sluice embeds the sluice rate limiter in a Go service: the rules
// of a YAML rules file (docs/api.md, "The rules file"), in force again
// within a poll interval of every saved edit, decide the calls of an
// http.Handler or of any code that asks Check.
//
//	lim, err := sluice.New(ctx, sluice.Options{RulesFile: "rules.yaml"})
//	if err != nil { … }
//	defer lim.Close()
//	http.ListenAndServe(":8080", lim.Middleware(api))
//
// It is the wiring `sluice serve` does for its own decisions — the same
// rules file watcher, limiter and in-memory store — without the servers.
// The packages it wires stay available for what it does not cover:
// limiter and rules to decide calls against rules built in code,
// store/redis and store/failover for one limit shared by several
// instances (Options.Store), middleware for the identity options of the
// middleware (Limiter.Middleware takes them).
package sluice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/store/memory"
)

// Request is one call to decide (limiter.Request).
type Request = limiter.Request

// Decision is the answer for one call (limiter.Decision).
type Decision = limiter.Decision

// Options configures New. Only RulesFile is required.
type Options struct {
	// RulesFile is the path of the YAML rules file; it must exist. Edits
	// saved to it are put in force within PollInterval; an edit that does
	// not load is logged and the last rules that loaded stay in force.
	RulesFile string
	// PollInterval is how often the rules file is checked for edits.
	// Default 1s: one stat a check, a read only when the file changed.
	PollInterval time.Duration
	// Store holds the counters. Default: an in-memory store
	// (memory.DefaultConfig), which limits this process alone; pass a
	// store/redis (or store/failover) store for one limit across several
	// instances. A Store given here is not closed by Close.
	Store limiter.Store
	// IPv6Prefix is the prefix length IPv6 callers are keyed by. Default
	// 64 (see limiter.Config).
	IPv6Prefix int
	// Logger receives rule reloads and rules file errors. Default
	// slog.Default().
	Logger *slog.Logger
}

// Limiter decides calls against the rules of a rules file, following
// every edit of it. Safe for concurrent use; create one with New and
// Close it when done.
type Limiter struct {
	lim   *limiter.Limiter
	src   *rulestore.File
	store *memory.Store // the store New made, nil when Options.Store was given

	stop      context.CancelFunc
	watching  sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New loads o.RulesFile and returns a Limiter with its rules in force. It
// watches the file until ctx is done or Close is called. A rules file that
// is missing or does not load is an error naming the file, the line and
// the problem.
func New(ctx context.Context, o Options) (*Limiter, error) {
	if o.RulesFile == "" {
		return nil, errors.New("sluice: Options.RulesFile is empty; give the path of a rules file")
	}
	// rulestore creates a missing file with an example; an embedding
	// service should not get rules it did not write.
	if _, err := os.Stat(o.RulesFile); err != nil {
		return nil, fmt.Errorf("sluice: rules file: %w", err)
	}
	if o.PollInterval < 0 {
		return nil, fmt.Errorf("sluice: Options.PollInterval must be ≥ 0 (0 = default 1s), got %v", o.PollInterval)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	src, err := rulestore.OpenFile(rulestore.FileConfig{Path: o.RulesFile, PollInterval: o.PollInterval, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("sluice: %w", err)
	}
	l := &Limiter{src: src}
	store := o.Store
	if store == nil {
		cfg := memory.DefaultConfig()
		cfg.Logger = log
		if l.store, err = memory.New(cfg); err != nil {
			src.Close()
			return nil, fmt.Errorf("sluice: %w", err)
		}
		store = l.store
	}
	l.lim = limiter.New(store, limiter.Config{IPv6Prefix: o.IPv6Prefix})
	rulestore.Follow(src, l.lim.SetRules, log)
	ctx, l.stop = context.WithCancel(ctx)
	l.watching.Go(func() { _ = src.Run(ctx) })
	return l, nil
}

// Check decides req (see limiter.Limiter.Check).
func (l *Limiter) Check(ctx context.Context, req *Request) (Decision, error) {
	return l.lim.Check(ctx, req)
}

// Middleware returns next limited by the rules: a denied call gets 429 and
// never reaches next (see middleware.Middleware, whose options it takes).
func (l *Limiter) Middleware(next http.Handler, opts ...middleware.Option) http.Handler {
	return middleware.Middleware(l.lim, opts...)(next)
}

// Limiter returns the limiter underneath, for what Check does not cover
// (CheckMany, Reserve, the rules in force).
func (l *Limiter) Limiter() *limiter.Limiter { return l.lim }

// Close stops watching the rules file and stops the background work of
// the store New made. Calls decided after Close are decided with the last
// rules in force. It is safe to call more than once.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.stop()
		l.closeErr = l.src.Close()
		l.watching.Wait()
		if l.store != nil {
			if err := l.store.Close(); l.closeErr == nil {
				l.closeErr = err
			}
		}
	})
	return l.closeErr
}
