package rulestore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/rules"
)

// watched is what every Source keeps beside the rules in force: its
// Status and its subscribers. File, Postgres and the envoyproxy/ratelimit
// sources embed it; its Status and Subscribe are theirs.
type watched struct {
	stMu sync.Mutex // guards st
	st   Status

	subMu sync.Mutex
	subs  []func(*rules.Index)
}

// Status reports the source, the revision in force and the last problem.
func (w *watched) Status() Status {
	w.stMu.Lock()
	defer w.stMu.Unlock()
	return w.st
}

// Subscribe registers fn to be called after every change; see Source.
func (w *watched) Subscribe(fn func(*rules.Index)) {
	w.subMu.Lock()
	w.subs = append(w.subs, fn)
	w.subMu.Unlock()
}

// editStatus changes the Status under its lock.
func (w *watched) editStatus(fn func(*Status)) {
	w.stMu.Lock()
	defer w.stMu.Unlock()
	fn(&w.st)
}

// setError records msg as the problem at now; "" clears it.
func (w *watched) setError(msg string, now time.Time) {
	w.editStatus(func(st *Status) {
		if msg == "" {
			now = time.Time{}
		}
		st.Error, st.ErrorAt = msg, now
	})
}

// loaded records ix as the rules in force since now.
func (w *watched) loaded(ix *rules.Index, now time.Time) {
	w.editStatus(func(st *Status) { st.Revision, st.Loaded = ix.Revision(), now })
}

// tell calls the subscribers with ix. The caller holds the lock that
// orders its changes, which keeps the calls in revision order.
func (w *watched) tell(ix *rules.Index) {
	w.subMu.Lock()
	subs := w.subs
	w.subMu.Unlock()
	for _, fn := range subs {
		fn(ix)
	}
}

// pollEvery calls poll at every tick of interval until ctx is done
// (returning ctx.Err()) or done is closed (returning nil). poll's problems
// are its own to log and keep in Status.
func pollEvery(ctx context.Context, tick func(time.Duration) (<-chan time.Time, func()), interval time.Duration,
	done <-chan struct{}, poll func() error) error {
	c, stop := tick(interval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return nil
		case <-c:
			_ = poll()
		}
	}
}
