package rulestore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/rules"
)

// envoyHead is what the sources of envoyproxy/ratelimit configuration (a
// runtime directory, an xDS server) share: the rules in force, loaded from
// a list of files; the status; the subscribers; the last problem. A
// change that does not load leaves the last good rules in force, is
// logged at WARN once and shows in Status (hence the metrics
// sluice_rules_load_failing and sluice_rules_load_errors_total) until a
// good change comes.
type envoyHead struct {
	kind, location string
	opt            envoyconf.Options
	log            *slog.Logger
	now            func() time.Time

	cur      atomic.Pointer[rules.Index]
	detailed atomic.Pointer[detailedOf] // of cur

	// mu serializes loads and with them the subscriber calls, and guards
	// hash and bad.
	mu   sync.Mutex
	hash [32]byte // of the files in force
	bad  string   // the last problem, logged once ("" when none): the hash of files refused, or an error's text

	watched
}

func (h *envoyHead) Current() *rules.Index { return h.cur.Load() }

// detailedOf is the ids of the rules of ix whose descriptor has
// detailed_metric.
type detailedOf struct {
	ix  *rules.Index
	ids map[string]bool
}

// DetailedMetric returns the ids of the rules of ix whose descriptor has
// envoyproxy/ratelimit's detailed_metric, nil when ix is not the rules in
// force (or none has it).
func (h *envoyHead) DetailedMetric(ix *rules.Index) map[string]bool {
	if d := h.detailed.Load(); d != nil && d.ix == ix {
		return d.ids
	}
	return nil
}

// Update refuses: the configuration is envoyproxy/ratelimit's, changed
// where it lives.
func (h *envoyHead) Update(context.Context, int64, func(*rules.Set) error) (*rules.Index, error) {
	return nil, fmt.Errorf("%w: the rules are envoyproxy/ratelimit configuration from %s %s: change them there "+
		"(or convert them once with sluice rules import and serve that rules file)", ErrUnavailable, h.kind, h.location)
}

// filesHash hashes the names and contents of files.
func filesHash(files []envoyconf.File) [32]byte {
	d := sha256.New()
	for _, f := range files {
		fmt.Fprintf(d, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		d.Write(f.Data)
	}
	var h [32]byte
	d.Sum(h[:0])
	return h
}

// load puts files in force, unless they are what is in force already. A
// set that does not load is the error returned, logged once (first is
// the load at start: nothing logged, nothing in force yet).
func (h *envoyHead) load(files []envoyconf.File, first bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	sum := filesHash(files)
	if !first && sum == h.hash {
		h.clearBadLocked()
		return nil
	}
	key := fmt.Sprintf("%x", sum)
	if !first && key == h.bad {
		return fmt.Errorf("%s", h.Status().Error)
	}
	res, err := envoyconf.LoadResult(files, h.opt)
	var ix *rules.Index
	var set *rules.Set
	var notes []string
	if err == nil {
		set, notes = res.Set, res.Notes
		if cur := h.cur.Load(); cur != nil {
			set.Revision = cur.Revision() + 1
		} else {
			set.Revision = 1
		}
		ix, err = rules.Compile(set)
	}
	if err != nil {
		err = fmt.Errorf("rulestore: envoyproxy/ratelimit configuration (%s %s): %w", h.kind, h.location, err)
		if first {
			return err
		}
		return h.failLocked(key, err)
	}
	for _, n := range notes {
		h.log.Warn("rulestore: envoyproxy/ratelimit configuration: "+n, "source", h.kind)
	}
	h.hash = sum
	h.clearBadLocked()
	h.detailed.Store(&detailedOf{ix: ix, ids: res.DetailedMetric})
	h.cur.Store(ix)
	h.loaded(ix, h.now())
	if !first {
		h.log.Info("rulestore: loaded a change of the envoyproxy/ratelimit configuration",
			"source", h.kind, "location", h.location, "files", len(files), "revision", ix.Revision(), "rules", len(ix.Rules()))
	}
	h.tell(ix)
	return nil
}

// fail records a problem that keeps the last good rules in force: the
// source cannot be read, or what it holds does not load. It is logged
// once per distinct key.
func (h *envoyHead) fail(key string, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failLocked(key, err)
}

// failLocked is fail; h.mu must be held.
func (h *envoyHead) failLocked(key string, err error) error {
	if key == h.bad {
		return err
	}
	h.bad = key
	h.log.Warn("rulestore: envoyproxy/ratelimit configuration change does not load; keeping the last good configuration",
		"source", h.kind, "location", h.location, "revision", h.cur.Load().Revision(), "error", err)
	h.setError(err.Error(), h.now())
	return err
}

// clearBadLocked forgets the last problem; h.mu must be held.
func (h *envoyHead) clearBadLocked() {
	if h.bad == "" {
		return
	}
	h.bad = ""
	h.log.Info("rulestore: envoyproxy/ratelimit configuration loads again", "source", h.kind, "location", h.location)
	h.setError("", time.Time{})
}
