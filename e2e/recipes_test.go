package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/golang-jwt/jwt/v5"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/rulecheck"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/rules"
)

// recipeBlock matches a yaml block of docs/recipes.md whose first line
// names it: "# recipe: NAME" (a rules file) or "# recipe-input: NAME".
var recipeBlock = regexp.MustCompile("(?s)```yaml\n# (recipe|recipe-input): ([a-z-]+)\n(.*?)```")

// recipes returns docs/recipes.md's rules files and inputs by name, each
// as written there (its name line included).
func recipes(t *testing.T) (files, inputs map[string]string) {
	t.Helper()
	doc, err := os.ReadFile("../docs/recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	files, inputs = map[string]string{}, map[string]string{}
	for _, m := range recipeBlock.FindAllStringSubmatch(string(doc), -1) {
		body := "# " + m[1] + ": " + m[2] + "\n" + m[3]
		if m[1] == "recipe" {
			files[m[2]] = body
		} else {
			inputs[m[2]] = body
		}
	}
	return files, inputs
}

// TestRecipes runs every recipe of docs/recipes.md against the built
// binary: the page's own rule files, loaded as written, and the limit each
// one promises checked by driving calls. A recipe the page adds without a
// test here fails.
func TestRecipes(t *testing.T) {
	files, inputs := recipes(t)
	tests := map[string]func(t *testing.T, path string){
		"plans":     recipePlans,
		"expensive": recipeExpensive,
		"login":     recipeLogin,
		"egress":    recipeEgress,
		"envoy":     func(t *testing.T, path string) { recipeEnvoy(t, path, inputs["envoyproxy"]) },
	}
	var names []string
	for name := range files {
		names = append(names, name)
		if tests[name] == nil {
			t.Errorf("docs/recipes.md has recipe %q, which no test runs", name)
		}
	}
	sort.Strings(names)
	if len(names) != len(tests) {
		t.Errorf("docs/recipes.md has recipes %v, want one of each of the %d tested", names, len(tests))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if tests[name] == nil {
				t.Skip("no test")
			}
			set, err := rules.ParseYAML([]byte(files[name]))
			if err != nil {
				t.Fatalf("the recipe does not load: %v", err)
			}
			if _, err := rules.Compile(set); err != nil {
				t.Fatalf("the recipe does not compile: %v", err)
			}
			// Lint-clean, but for the one finding the page explains.
			findings, err := rulecheck.Lint([]byte(files[name]))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range findings {
				if name == "login" && f.Rule == "login-per-ip" && strings.HasPrefix(f.Message, "keyed by ip, it also counts") {
					continue
				}
				t.Errorf("sluice rules lint: %s", f)
			}
			path := filepath.Join(t.TempDir(), name+".yaml")
			if err := os.WriteFile(path, []byte(files[name]), 0o644); err != nil {
				t.Fatal(err)
			}
			tests[name](t, path)
		})
	}
}

// recipePlans: two gateways on one Redis, with the recipe's JWT plans.
func recipePlans(t *testing.T, path string) {
	rds := redistest.Start(t)
	secret := "recipe-secret-of-at-least-32-bytes!!"
	up := newCountingUpstream(t, nil)
	flags := []string{"--redis", rds.Addr(), "--jwt-hs256-secret", secret}
	gw1 := startGateway(t, path, up.URL, flags...)
	gw2 := startGateway(t, path, up.URL, flags...)
	token := func(sub, plan string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub, "plan": plan, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	bearer := func(tok string) func(int) map[string]string {
		return func(int) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	}

	// The rules are token buckets: a token comes back every 2 s
	// (anonymous, 30 a minute) or 0.6 s (free, 100 a minute), so a slow
	// machine sees up to that many more pass; each check allows for the
	// time it took.
	within := func(what string, got, limit int, took, every time.Duration) {
		t.Helper()
		if most := limit + int(took/every) + 1; got < limit || got > most {
			t.Errorf("%s: %d calls passed in %s, want %d to %d", what, got, took.Round(time.Millisecond), limit, most)
		}
	}
	// Anonymous: 30 a minute per IP, across both gateways.
	anonStart := time.Now()
	n := passed(t, 20, "GET", gw1.url+"/api/orders", nil) + passed(t, 20, "GET", gw2.url+"/api/orders", nil)
	within("anonymous, 40 calls", n, 30, time.Since(anonStart), 2*time.Second)
	anonPassed := n
	spent := time.Since(anonStart) < 2*time.Second // no token came back yet
	c := gwDo(t, "GET", gw2.url+"/api/orders", nil)
	if spent && (c.status != 429 || c.header.Get("Retry-After") == "") {
		t.Errorf("anonymous, 41st call: %d %s, want 429 with Retry-After", c.status, c.body)
	}
	if c.status == 200 {
		anonPassed++
	}
	// Free: 100 a minute per user, across both gateways, not capped by
	// the IP the anonymous calls used up.
	free := bearer(token("alice", "free"))
	start := time.Now()
	n = passed(t, 50, "GET", gw1.url+"/api/orders", free) + passed(t, 60, "GET", gw2.url+"/api/orders", free)
	within("free user, 110 calls", n, 100, time.Since(start), 600*time.Millisecond)
	// Pro: more than the free plan, from the same IP.
	if n := passed(t, 150, "GET", gw1.url+"/api/orders", bearer(token("bob", "pro"))); n != 150 {
		t.Errorf("pro user: %d of 150 calls passed, want 150", n)
	}
	// A plan the rules do not name is anonymous: it is decided by the
	// IP's bucket, spent by 40 calls (checked when no token came back).
	unknown := map[string]string{"Authorization": "Bearer " + token("carol", "enterprise")}
	anonPassed += passed(t, 10, "GET", gw1.url+"/api/orders", func(int) map[string]string { return unknown })
	// The registered partner key is not the anonymous IP's.
	key := func(int) map[string]string { return map[string]string{"X-API-Key": "k_live_partner_acme"} }
	if n := passed(t, 40, "GET", gw2.url+"/api/orders", key); n != 40 {
		t.Errorf("partner key: %d of 40 calls passed, want 40", n)
	}
	// An unregistered key is anonymous.
	guess := func(int) map[string]string { return map[string]string{"X-API-Key": "k_guess"} }
	anonPassed += passed(t, 10, "GET", gw2.url+"/api/orders", guess)
	// All 61 calls above were the IP's: anonymous, a token of an unknown
	// plan, an unregistered key. Had either of the last two its own
	// bucket, 10 more would pass.
	within("the IP's 60 calls (anonymous, unknown plan, unregistered key)", anonPassed, 30, time.Since(anonStart), 2*time.Second)
}

// recipeExpensive: the per-caller and the global limit of POST /reports.
func recipeExpensive(t *testing.T, path string) {
	in := serve(t, path)
	for i := 1; i <= 11; i++ {
		a, _ := in.check(t, map[string]any{"user": "heavy", "endpoint": "POST /reports"})
		if want := i <= 10; a.Allowed != want || (!want && (a.Rule == nil || *a.Rule != "reports-per-caller")) {
			t.Fatalf("heavy's call %d: %+v, want allowed %v (denied by reports-per-caller)", i, a, want)
		}
	}
	start := time.Now()
	allowed := 0
	for i := range 150 {
		a, _ := in.check(t, map[string]any{"user": fmt.Sprintf("u%d", i), "endpoint": "POST /reports"})
		if a.Allowed {
			allowed++
		} else if a.Rule == nil || *a.Rule != "reports-global" {
			t.Fatalf("caller u%d: %+v, want denied by reports-global", i, a)
		}
	}
	// 90 left after heavy's 10, plus a token every 600 ms meanwhile.
	most := 90 + int(time.Since(start)/(600*time.Millisecond)) + 1
	if allowed < 90 || allowed > most {
		t.Errorf("150 callers together: %d allowed, want 90 to %d (the global bucket's 90 left and its refill)", allowed, most)
	}
	for range 20 {
		if a, _ := in.check(t, map[string]any{"user": "heavy", "endpoint": "GET /reports/1"}); !a.Allowed || a.Rule != nil {
			t.Fatalf("GET /reports/1: %+v, want allowed under no rule", a)
		}
	}
}

// recipeLogin: 5 attempts a minute per IP and per account.
func recipeLogin(t *testing.T, path string) {
	in := serve(t, path)
	count := func(n int, call func(i int) map[string]any) (int, map[string]int) {
		ok, by := 0, map[string]int{}
		for i := range n {
			a, _ := in.check(t, call(i))
			if a.Allowed {
				ok++
			} else if a.Rule != nil {
				by[*a.Rule]++
			}
		}
		return ok, by
	}
	ok, by := count(10, func(i int) map[string]any {
		return map[string]any{"user": "alice@example.com", "ip": fmt.Sprintf("198.51.100.%d", i+1), "endpoint": "POST /login"}
	})
	if ok != 5 || by["login-per-account"] != 5 {
		t.Errorf("one account from 10 addresses: %d passed, denials %v, want 5 and 5 by login-per-account", ok, by)
	}
	ok, by = count(10, func(i int) map[string]any {
		return map[string]any{"user": fmt.Sprintf("user%d@example.com", i), "ip": "203.0.113.7", "endpoint": "POST /login"}
	})
	if ok != 5 || by["login-per-ip"] != 5 {
		t.Errorf("one address trying 10 accounts: %d passed, denials %v, want 5 and 5 by login-per-ip", ok, by)
	}
	ok, _ = count(10, func(int) map[string]any {
		return map[string]any{"user": "alice@example.com", "ip": "203.0.113.7", "endpoint": "GET /api/orders"}
	})
	if ok != 10 {
		t.Errorf("GET /api/orders by the locked-out account and address: %d of 10 passed, want 10", ok)
	}
}

// recipeEgress: 4 workers reserve through two instances on one Redis;
// the slots are 100 ms apart.
func recipeEgress(t *testing.T, path string) {
	rds := redistest.Start(t)
	ins := []*instance{serve(t, path, "--redis", rds.Addr()), serve(t, path, "--redis", rds.Addr())}
	var mu sync.Mutex
	var slots []int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				var a struct {
					Allowed  bool  `json:"allowed"`
					SendAtUs int64 `json:"send_at_us"`
				}
				resp := do(t, "POST", ins[w%2].data+"/ratelimit/reserve",
					map[string]any{"user": "api.partner.example", "plan": "egress", "max_wait_ms": 10000}, &a)
				if resp.StatusCode != 200 || !a.Allowed {
					t.Errorf("worker %d: reserve: %d %+v, want a slot", w, resp.StatusCode, a)
					return
				}
				mu.Lock()
				slots = append(slots, a.SendAtUs)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(slots) != 40 {
		t.Fatalf("%d slots, want 40", len(slots))
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	for i := 1; i < len(slots); i++ {
		if gap := slots[i] - slots[i-1]; gap < 100_000-1 {
			t.Errorf("slots %d and %d are %d µs apart, want at least 100 ms (10 a second, no burst)", i-1, i, gap)
		}
	}
	// Reserving past max_wait_ms is denied, nothing taken.
	var a struct {
		Allowed bool `json:"allowed"`
	}
	do(t, "POST", ins[0].data+"/ratelimit/reserve", map[string]any{"user": "api.partner.example", "plan": "egress", "max_wait_ms": 100}, &a)
	if a.Allowed {
		t.Errorf("a reservation behind 4 s of slots with max_wait_ms 100 was granted")
	}
}

// recipeEnvoy: the import of the envoyproxy/ratelimit configuration gives
// the recipe's rules, and the Envoy API enforces them.
func recipeEnvoy(t *testing.T, path, config string) {
	if config == "" {
		t.Fatal("docs/recipes.md has no recipe-input: envoyproxy block")
	}
	dir := t.TempDir()
	imported, err := rules.ParseYAML(importEnvoy(t, dir, "edge.yaml", config))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	written, _ := rules.ParseYAML(data)
	for _, s := range []*rules.Set{imported, written} {
		for i := range s.Rules {
			s.Rules[i].Description = ""
		}
	}
	if !reflect.DeepEqual(imported.Rules, written.Rules) {
		a, _ := json.Marshal(imported.Rules)
		b, _ := json.Marshal(written.Rules)
		t.Errorf("sluice rules import of the recipe's configuration:\n%s\nthe recipe's rules:\n%s", a, b)
	}

	// A fixed window of a minute is aligned to the minute: keep clear of it.
	if d := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); d < 5*time.Second {
		time.Sleep(d + 100*time.Millisecond)
	}
	rds := redistest.Start(t)
	_, client := serveEnvoy(t, dir, "recipe", data, "--redis", rds.Addr())
	ask := func(kv ...string) rlsv3.RateLimitResponse_Code {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(kv...)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i := 1; i <= 11; i++ {
		want := rlsv3.RateLimitResponse_OK
		if i == 11 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := ask("remote_address", "192.0.2.9"); got != want {
			t.Errorf("remote_address 192.0.2.9, request %d: %v, want %v", i, got, want)
		}
	}
	if got := ask("remote_address", "192.0.2.10"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("another address: %v, want OK", got)
	}
	// The search key is one fixed window of a second for everyone: 20
	// requests get at most 5 per window they span.
	start := time.Now()
	ok := 0
	for range 20 {
		if ask("generic_key", "search") == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	windows := int(time.Now().Unix()-start.Unix()) + 1
	if ok == 0 || ok > 5*windows {
		t.Errorf("20 requests on the shared search key over %d one-second windows: %d OK, want 1 to %d", windows, ok, 5*windows)
	}
}
