package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

// take.lua's packed arguments and reply (see its header).
const (
	paramSize  = 34 // per key: kind, flags (bytes), limit, window, burst, cost (doubles)
	resultSize = 26 // per key: allowed, reason (bytes), remaining, reset_after, retry_after (doubles)

	flagShadow   = 1
	flagNewCall  = 2
	flagCharge   = 4
	maxExactUnit = 1 << 53 // doubles hold every integer up to here
)

// appendParams appends op's record of take.lua's ARGV[2]; first marks the
// first key of a call.
func appendParams(dst []byte, op *limiter.Op, first bool) []byte {
	var flags byte
	if op.Shadow {
		flags |= flagShadow
	}
	if first {
		flags |= flagNewCall
	}
	if op.Params.Charge && op.Cost > 0 && algorithm.CanCharge(op.Params.Kind) {
		flags |= flagCharge
	}
	dst = append(dst, byte(op.Params.Kind)+1, flags)
	for _, v := range [4]int64{op.Params.Limit, op.Params.Window, op.Params.Burst, op.Cost} {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64(v)))
	}
	return dst
}

// exec runs take.lua over keys with params and returns its reply, as run
// runs a script. A run answered TRYAGAIN is tried again tries times (see
// run); 0: until ctx ends.
func (s *Store) exec(ctx context.Context, keys []string, params []byte, tries int) (string, error) {
	// A copy: when ctx ends first, the call returns while the command may
	// still wait to be written, and params is reused.
	return s.run(ctx, takeFunction, s.take, keys, []string{s.scriptNow(), string(params)}, tries)
}

// run runs a script over keys with args and returns its reply: FCALL of
// function in the library where every node has it, else script by EVALSHA
// (EVAL on NOSCRIPT). A node without the library (a restart without
// persistence, a master added after the store started, FUNCTION FLUSH)
// answers "Function not found": the library is loaded on every node again
// and the run retried once, then run with EVALSHA/EVAL if it still is not
// found.
//
// MOVED and ASK are followed by the client. TRYAGAIN — a script of several
// keys of a slot that is moving between masters, not all of them on the
// node asked — is the cluster at work, not failing: the run is made again
// after a pause (1 ms, doubling up to 16 ms), up to tries times (0: until
// ctx ends, when ctx's error is returned). Each try either ran the script
// or was refused before it ran, so nothing is taken twice. The run and its
// keys are counted once (ScriptRuns).
func (s *Store) run(ctx context.Context, function string, script *rueidis.Lua, keys, args []string, tries int) (string, error) {
	ctx = pipelined(ctx)
	s.runs.Add(1)
	s.runKeys.Add(int64(len(keys)))
	return again(ctx, tries, func() (string, error) { return s.runOnce(ctx, function, script, keys, args) })
}

// again calls f, and again while it fails with TRYAGAIN, as run says.
func again(ctx context.Context, tries int, f func() (string, error)) (string, error) {
	pause := time.Millisecond
	for try := 0; ; try++ {
		reply, err := f()
		if !tryAgain(err) || (tries > 0 && try >= tries) {
			return reply, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 16*time.Millisecond)
	}
}

// pipelined is the context a command of a decision is sent under: ctx,
// ending when ctx ends, at its deadline too, but with no deadline for
// the client to see and a Done channel even when ctx never ends. The
// client then queues the command on the connection's pipeline, read by
// a goroutine of its own, and sets no deadline on the socket. Given a
// deadline, or a context that never ends, it would send the command on
// the caller's goroutine while the connection has nothing else out, and
// read its answer under a socket deadline of the earlier of ctx's and
// ConnWriteTimeout (1 s), wall time: a process stopped longer than that
// (SIGSTOP, a VM's steal) would then lose, as "i/o timeout", an answer
// waiting in the socket after Redis took the tokens. How long a call
// waits is its caller's to say (see store/failover's MaxWait, counted
// in this process's running time).
func pipelined(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); ok || ctx.Done() == nil {
		return pipelinedCtx{ctx}
	}
	return ctx
}

// pipelinedCtx is a context that ends as its parent does but tells no
// deadline, and whose Done is never nil (see pipelined).
type pipelinedCtx struct{ context.Context }

func (pipelinedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c pipelinedCtx) Done() <-chan struct{} {
	if d := c.Context.Done(); d != nil {
		return d
	}
	return never
}

// never is the Done of a pipelinedCtx whose parent never ends: nothing
// closes it.
var never = make(chan struct{})

// runOnce is one try of run.
func (s *Store) runOnce(ctx context.Context, function string, script *rueidis.Lua, keys, args []string) (string, error) {
	if s.fcall {
		for try := 0; try < 2; try++ {
			r := s.client.Do(ctx, s.client.B().Fcall().Function(function).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
			if !functionNotFound(r.Error()) {
				return r.ToString()
			}
			if try == 0 {
				s.loadLibrary(ctx)
			}
		}
	}
	return script.Exec(ctx, s.client, keys, args).ToString()
}

// tryAgain reports whether err is TRYAGAIN: a command of several keys of
// a slot being moved, not all of them on the node asked.
func tryAgain(err error) bool {
	var rerr *rueidis.RedisError
	return errors.As(err, &rerr) && rerr.IsTryAgain()
}

// scriptNow is the scripts' ARGV[1]: the store's clock in µs after epoch,
// or "" for the server's own clock.
func (s *Store) scriptNow() string {
	if s.cfg.Clock == nil {
		return ""
	}
	return strconv.FormatInt(s.cfg.Clock()-epoch, 10)
}

// functionNotFound reports whether err is FCALL's answer from a node
// without the function.
func functionNotFound(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(rerr.Error(), "Function not found")
}

// epoch is the origin of the scripts' times: 2020-09-13T12:26:40Z in Unix
// µs (codec.lua's EPOCH). The scripts count µs from it, so that every
// instant up to 2262 is an exact integer in a Lua double.
const epoch = 1_600_000_000_000_000

// checkReply checks that reply has the size of n keys' answers and starts
// with a time.
func checkReply(reply string, n int) error {
	if len(reply) != 8+resultSize*n {
		return fmt.Errorf("%w: take returned %d bytes for %d buckets", ErrReply, len(reply), n)
	}
	if now, ok := exactInt(reply); !ok || now+epoch <= 0 || now > math.MaxInt64/1000-epoch {
		return fmt.Errorf("%w: take returned time %q", ErrReply, reply[:8])
	}
	return nil
}

// replyNow is the decision time (Unix µs) at the head of a checked reply.
func replyNow(reply string) int64 {
	v, _ := exactInt(reply)
	return v + epoch
}

// exactInt reads a little-endian double holding a whole number.
func exactInt(b string) (int64, bool) {
	f := math.Float64frombits(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
	if f != math.Trunc(f) || f < -math.MaxInt64 || f > math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

// parseResults reads len(out) answers from b, checking each.
func parseResults(b string, out []algorithm.Result) error {
	for k := range out {
		r := b[k*resultSize : (k+1)*resultSize]
		remaining, ok1 := exactInt(r[2:])
		reset, ok2 := exactInt(r[10:])
		retry, ok3 := exactInt(r[18:])
		if r[0] > 1 || r[1] > byte(algorithm.ReasonCostExceedsCapacity) || !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("%w: take answer %q", ErrReply, r)
		}
		out[k] = algorithm.Result{
			Allowed:    r[0] == 1,
			Reason:     algorithm.Reason(r[1]),
			Remaining:  remaining,
			ResetAfter: reset,
			RetryAfter: retry,
		}
	}
	return nil
}

// A call's state in a batch.
const (
	callWaiting int32 = iota
	callDone
	callAbandoned
)

// batcher sends the calls that goroutines make at the same time to a
// standalone server as shared script runs (group commit). A call made
// when no run is out goes at once, in a run of its own. A call made while
// a run is out queues, and when a run comes back the next run takes every
// queued call (up to maxKeys keys, oldest first); but when fill keys are
// queued and fewer than maxInflight runs are out, the call that made them
// fill sends them at once. Under light load nothing waits; under moderate
// load a call waits at most for the run it found out, and runs carry the
// calls made meanwhile; under heavy load maxInflight runs of at least fill
// keys are out. The per-run cost (the command, its parsing, TIME, the
// reply, the server's wake-up) is paid once for all of a run's calls. With
// a window (below) fill plays no part: a call that finds fewer than
// maxInflight runs out would start a run, and opens the window. Each
// call is still all or nothing on its own (take.lua's calls), and the run
// is atomic as a whole.
//
// With reserve set, the calls are reservations and the runs reserve.lua's:
// each reservation is atomic on its own. A call that shares a key with the
// run waits for the next one, ahead of every later call, so each bucket's
// reservations are decided, and given slots, in the order they were made.
//
// With a window (wait above 0), a call that would start a run opens the
// window instead: calls made while it is open queue, and a run takes the
// queued calls wait later, or at once when they fill maxKeys keys. The
// window holds one of the maxInflight slots, and one is open at a time. A
// run that comes back while a window is open gives up its slot and leaves
// the queued calls to the window's run.
//
// A caller whose context ends while its call waits returns at once; the
// call may still be decided (and consume) if its run was already sent, as
// with any request abandoned in flight. A call still in its window, or
// queued, when its caller gives up is never sent.
//
// Safe for concurrent use.
type batcher struct {
	s           *Store
	maxKeys     int
	maxInflight int
	fill        int           // keys queued behind a run out from which another goes at once
	reserve     bool          // runs reserve.lua (reservations), not take.lua
	wait        time.Duration // the window; 0: none

	mu       sync.Mutex
	queue    []*callBuf // waiting calls, oldest first; under mu
	queued   int        // keys of the calls in queue; under mu
	inflight int        // runs out, and the open window; under mu
	window   uint64     // the open window's number, 0 when none is open; under mu
	windows  uint64     // windows opened so far; under mu

	runs sync.Pool // *batchRun
}

// batchRun is the working memory of one script run.
type batchRun struct {
	calls  []*callBuf
	keys   []string
	params []byte
	waits  []byte              // reserve.lua's ARGV[3]
	has    map[string]struct{} // keys, which take.lua reads once per run
}

func newBatcher(s *Store, maxKeys, maxInflight, fill int, wait time.Duration) *batcher {
	bt := &batcher{s: s, maxKeys: maxKeys, maxInflight: maxInflight, fill: min(fill, maxKeys), wait: wait}
	bt.runs.New = func() any { return &batchRun{has: make(map[string]struct{})} }
	return bt
}

// do decides the call in b (keys and params set) and fills b.out and b.now.
// abandoned reports that ctx ended first and b now belongs to the run that
// carries it.
func (bt *batcher) do(ctx context.Context, b *callBuf) (abandoned bool, err error) {
	if b.done == nil {
		b.done = make(chan struct{}, 1)
	}
	b.deadline, _ = ctx.Deadline()
	b.err = nil
	b.state.Store(callWaiting)

	bt.mu.Lock()
	bt.queue = append(bt.queue, b)
	bt.queued += len(b.keys)
	var r *batchRun
	switch {
	case bt.window != 0 && bt.queued >= bt.maxKeys:
		// The window's run is full: it goes now.
		bt.window = 0
		r = bt.takeLocked()
	case bt.window != 0 || bt.inflight >= bt.maxInflight:
		// Joins the open window, or the queue the next run takes.
	case bt.wait == 0 && bt.inflight > 0 && bt.queued < bt.fill:
		// A run is out: the call waits for it to come back and goes in
		// the next run with the calls queued meanwhile, unless fill keys
		// are queued (the default case sends them now). With a window
		// configured, the window coalesces instead: the call opens one.
	case bt.wait > 0 && bt.queued < bt.maxKeys:
		bt.inflight++
		bt.windows++
		w := bt.windows
		bt.window = w
		time.AfterFunc(bt.wait, func() { bt.close(w) })
	default:
		bt.inflight++
		r = bt.takeLocked()
	}
	bt.mu.Unlock()
	if r != nil {
		if ctx.Done() == nil { // a caller that never gives up runs it itself
			bt.run(r)
			bt.next()
		} else {
			// In a goroutine of its own, not the caller's: the run may
			// outlive the caller's patience (it lives as long as its most
			// patient call), and the caller must be free to return when
			// its ctx ends.
			go func() {
				bt.run(r)
				bt.next()
			}()
		}
	}

	select {
	case <-b.done:
		return false, b.err
	case <-ctx.Done():
		if b.state.CompareAndSwap(callWaiting, callAbandoned) {
			return true, ctx.Err()
		}
		<-b.done // answered just now
		return false, b.err
	}
}

// close ends window w, if it is still open: its run goes with the calls
// queued by now, or its slot is given up if none are.
func (bt *batcher) close(w uint64) {
	bt.mu.Lock()
	if bt.window != w {
		bt.mu.Unlock() // gone already, full
		return
	}
	bt.window = 0
	r := bt.takeLocked()
	if len(r.calls) == 0 {
		bt.inflight--
		bt.mu.Unlock()
		bt.runs.Put(r)
		return
	}
	bt.mu.Unlock()
	bt.run(r)
	bt.next()
}

// next starts the next run if calls are queued and no window is open (the
// window's run takes them), else gives up the slot.
func (bt *batcher) next() {
	for {
		bt.mu.Lock()
		if len(bt.queue) == 0 || bt.window != 0 {
			bt.inflight--
			bt.mu.Unlock()
			return
		}
		r := bt.takeLocked()
		bt.mu.Unlock()
		if len(r.calls) > 0 {
			go func() {
				bt.run(r)
				bt.next()
			}()
			return
		}
		bt.runs.Put(r)
	}
}

// takeLocked moves the oldest queued calls, up to maxKeys keys (at least
// one call), into a run, dropping calls whose callers gave up. A call that
// shares a key with the run stays queued for the next one: take.lua reads
// every key once, before deciding. (Queued calls are concurrent, so any
// order between them is a valid one.) bt.mu held.
func (bt *batcher) takeLocked() *batchRun {
	r := bt.runs.Get().(*batchRun)
	r.calls, r.keys, r.params = r.calls[:0], r.keys[:0], r.params[:0]
	clear(r.has)
	kept := 0
	for k, b := range bt.queue {
		if b.state.Load() == callAbandoned {
			bt.s.bufs.Put(b)
			continue
		}
		if len(r.calls) > 0 && len(r.keys)+len(b.keys) > bt.maxKeys {
			kept += copy(bt.queue[kept:], bt.queue[k:])
			break
		}
		if r.shares(b.keys) {
			bt.queue[kept] = b
			kept++
			continue
		}
		r.calls = append(r.calls, b)
		r.keys = append(r.keys, b.keys...)
		r.params = append(r.params, b.params...)
		for _, key := range b.keys {
			r.has[key] = struct{}{}
		}
	}
	clear(bt.queue[kept:])
	bt.queue = bt.queue[:kept]
	bt.queued = 0
	for _, b := range bt.queue {
		bt.queued += len(b.keys)
	}
	return r
}

// shares reports whether one of keys is in the run.
func (r *batchRun) shares(keys []string) bool {
	for _, k := range keys {
		if _, ok := r.has[k]; ok {
			return true
		}
	}
	return false
}

// run sends r as one script run and hands each call its answers.
func (bt *batcher) run(r *batchRun) {
	// The run lives as long as its most patient call: the latest deadline,
	// none if a call has none (the client's liveness PING still ends it on
	// a dead connection, and Close on any).
	ctx := context.Background()
	var latest time.Time
	for _, b := range r.calls {
		if b.deadline.IsZero() {
			latest = time.Time{}
			break
		}
		if b.deadline.After(latest) {
			latest = b.deadline
		}
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	if bt.reserve {
		bt.s.reserveRun(ctx, r)
	} else {
		bt.s.takeRun(ctx, r)
	}
	for _, b := range r.calls {
		if b.state.CompareAndSwap(callWaiting, callDone) {
			b.done <- struct{}{}
		} else {
			bt.s.bufs.Put(b) // its caller gave up: the buffer is free
		}
	}
	clear(r.calls)
	bt.runs.Put(r)
}

// takeRun runs take.lua over r and sets each call's now, out and err.
func (s *Store) takeRun(ctx context.Context, r *batchRun) {
	reply, err := s.exec(ctx, r.keys, r.params, 0)
	if err == nil {
		err = checkReply(reply, len(r.keys))
	} else {
		err = fmt.Errorf("redis: take: %w", err)
	}
	var now int64
	if err == nil {
		now = replyNow(reply)
		reply = reply[8:]
	}
	for _, b := range r.calls {
		b.err = err
		if err == nil {
			n := len(b.keys)
			b.now = now
			b.err = parseResults(reply[:n*resultSize], b.out[:n])
			reply = reply[n*resultSize:]
		}
	}
}
