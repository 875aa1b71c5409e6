package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// TestConsoleInBrowser drives the console in headless Chromium: log in,
// watch the rates move under a bounded load, find the flooding caller in
// the top list, explain one of its calls, edit a rule (dry run, apply),
// see the diff and roll back. With SLUICE_CONSOLE_SCREENSHOTS=DIR it
// saves a PNG of each page there (docs/console/).
func TestConsoleInBrowser(t *testing.T) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; scripts/test.sh installs it): the console's browser test cannot run")
	}
	const token = "alice:s3cret-console"
	sl := startConsoleSluice(t, token, "rules:\n  - id: per-user\n    limit: 20\n    window: 1m\n")

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	// The first run starts the browser, for as long as ctx lives: no timeout
	// on it; each step gets its own.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	shots := os.Getenv("SLUICE_CONSOLE_SCREENSHOTS")
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			if shots == "" {
				return chromedp.Void{}, nil
			}
			b, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name+".png"), b, 0o644)
		}
	}
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	eval := func(js string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Evaluate[bool](js)(ctx, tg)
			return chromedp.Void{}, err
		}
	}
	// waitText waits until the text of sel contains want.
	waitText := func(sel, want string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			var got string
			for {
				v, err := chromedp.Text(sel, chromedp.NodeVisible)(ctx, tg)
				if err == nil {
					got = v
					if strings.Contains(got, want) {
						return chromedp.Void{}, nil
					}
				}
				select {
				case <-ctx.Done():
					return chromedp.Void{}, fmt.Errorf("%s: text %q, want it to contain %q: %w", sel, got, want, ctx.Err())
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}

	// Log in: a wrong token is refused, the right one opens the console.
	run("open the login page",
		chromedp.Navigate(sl.admin+"/console/"),
		chromedp.WaitVisible("#login-token"),
		chromedp.SendKeys("#login-token", "alice:wrong"),
		chromedp.Click("#login-submit"),
		waitText("#login-error", "not an admin token"),
		shot("login"),
	)
	run("log in",
		chromedp.SetValue("#login-token", token),
		chromedp.Click("#login-submit"),
		chromedp.WaitVisible("#now-allowed"),
	)

	// A bounded load: a flooding caller and a few well-behaved ones.
	load, stop := context.WithTimeout(context.Background(), 90*time.Second)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20000 && load.Err() == nil; i++ {
			user := "flood"
			if i%10 == 0 {
				user = fmt.Sprintf("user-%d", i%7)
			}
			sl.check(load, user)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer wg.Wait()
	defer stop()

	run("see the rates move",
		waitNumber("#now-denied"),
		waitNumber("#now-allowed"),
		waitText("#now-rules", "per-user"),
		shot("now"),
	)
	run("find the flooding caller",
		chromedp.Navigate(sl.admin+"/console/#top"),
		waitText("#top-rules", "user:flood"),
		shot("top"),
	)
	run("explain one of its calls",
		chromedp.Click(`button.explain-caller[data-caller="user:flood"]`),
		waitText("#ex-decision", "Denied by per-user"),
		waitText("#ex-buckets", "user:flood"),
		shot("explain"),
	)
	run("explain a whole Envoy request",
		eval(`(() => { document.getElementById("ex-envoy").value = '{"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "flood"}]}, {"entries": [{"key": "user", "value": "calm"}]}]}'; return true; })()`),
		chromedp.Click("#ex-submit"),
		waitText("#ex-decision", "Envoy request to edge: OVER_LIMIT"),
		waitText("#ex-checks", "Descriptor 0: OVER_LIMIT"),
		waitText("#ex-checks", "user:flood"),
		shot("explain-envoy"),
		eval(`(() => { document.getElementById("ex-envoy").value = ""; return true; })()`),
	)
	stop()
	wg.Wait()

	// Edit the rule: a dry run stores nothing, an apply makes revision 2
	// (the file starts at 0; the load changed nothing).
	run("edit a rule",
		chromedp.Navigate(sl.admin+"/console/#rules"),
		waitText("#rules-revision", "0"),
		chromedp.WaitVisible("#rules-doc"),
		eval(`(() => { const d = document.getElementById("rules-doc"); d.value = d.value.replace('"limit": 20', '"limit": -1'); return true; })()`),
		chromedp.Click("#rules-dry-run"),
		waitText("#rules-error", "limit: must be ≥ 0"),
		eval(`(() => { const d = document.getElementById("rules-doc"); d.value = d.value.replace('"limit": -1', '"limit": 50'); return true; })()`),
		chromedp.Click("#rules-dry-run"),
		waitText("#rules-outcome", "nothing was stored"),
		chromedp.Click("#rules-apply"),
		waitText("#rules-outcome", "Applied: 1 change(s), now revision 1"),
		waitText("#rules-revision", "1"),
	)
	if c, _ := sl.src.Current().Rule("per-user"); c.Limit != 50 {
		t.Fatalf("after apply: per-user limit %d, want 50", c.Limit)
	}
	run("see the diff",
		chromedp.Click(`button.diff-rev[data-revision="0"]`),
		waitText("#diff-title", "from revision 0 to 1"),
		waitText("#diff", `"limit":20`),
		waitText("#diff", `"limit":50`),
		shot("rules-diff"),
	)
	run("roll back",
		chromedp.Click(`button.rollback-rev[data-revision="0"]`),
		waitText("#rules-outcome", "Rolled back to the rules of revision 0: now revision 2"),
		waitText("#rules-revision", "2"),
		shot("rules"),
	)
	if c, _ := sl.src.Current().Rule("per-user"); c.Limit != 20 {
		t.Fatalf("after rollback: per-user limit %d, want 20", c.Limit)
	}
}

// waitNumber waits until sel shows a number above 0.
func waitNumber(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		var got string
		for {
			if v, err := chromedp.Text(sel)(ctx, tg); err == nil {
				got = v
				var f float64
				if _, err := fmt.Sscan(got, &f); err == nil && f > 0 {
					return chromedp.Void{}, nil
				}
			}
			select {
			case <-ctx.Done():
				return chromedp.Void{}, fmt.Errorf("%s: %q, want a number above 0: %w", sel, got, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

type consoleSluice struct {
	admin, data string
	src         *rulestore.File
	hc          *http.Client
}

func (s *consoleSluice) check(ctx context.Context, user string) {
	req, _ := http.NewRequestWithContext(ctx, "POST", s.data+"/ratelimit/check",
		strings.NewReader(`{"user":"`+user+`","endpoint":"GET /api/orders"}`))
	req.Header.Set("Content-Type", "application/json")
	if res, err := s.hc.Do(req); err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

// startConsoleSluice wires a sluice as `sluice serve` does — a rules file,
// the embedded store instrumented by the metrics, the check API reporting
// decisions and denials, the admin API with the console — on loopback.
func startConsoleSluice(t *testing.T, token, rulesYAML string) *consoleSluice {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := rulestore.OpenFile(rulestore.FileConfig{Path: path, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	st, err := memory.New(memory.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := metrics.New()
	lim := limiter.New(m.Instrument(st), limiter.Config{})
	envoy := rls.New(st, rls.Config{})
	setRules := func(ix *rules.Index) { lim.SetRules(ix); m.SetRules(ix); envoy.SetRules(ix) }
	setRules(src.Current())
	src.Subscribe(setRules)
	hitters := console.NewHitters(0, nil)
	sampler := console.NewSampler(m.ConsoleGatherer())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go sampler.Run(ctx, time.Second)
	data := httptest.NewServer(server.New(lim, server.Config{Logger: log, OnDecision: m.Decision,
		OnDenied: console.NewFeed(hitters, limiter.Config{}).Denied}))
	t.Cleanup(data.Close)
	adm := httptest.NewServer(admin.New(src, admin.Config{Token: token, Logger: log,
		Console: &admin.Console{Limiter: lim, Sampler: sampler, Hitters: hitters, Envoy: envoy, Instance: "test",
			Store: func() map[string]any { return map[string]any{"kind": "memory", "state": "ok", "buckets": st.Len()} }}}))
	t.Cleanup(adm.Close)
	return &consoleSluice{admin: adm.URL, data: data.URL, src: src, hc: data.Client()}
}
