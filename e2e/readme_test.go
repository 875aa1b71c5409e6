package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// TestReadmeTour runs the commands of the README's two-minute tour, as
// written, against the built binary started as the tour starts it (no
// flags but loopback ports, in an empty directory), and compares what they
// print with the output the README shows under them, line by line and
// field by field. Numbers that depend on the clock (reset_after_ms,
// retry_after_ms, Retry-After, the reset time, t=) must lie in the range a
// 10-a-minute rule allows; every other number, every field name and their
// order must be as written. "# ..." stands for any lines; the transport
// headers curl -i prints besides the documented ones (Content-Type,
// Content-Length, Date) are skipped.
func TestReadmeTour(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	tour := section(t, string(readme), "## A two-minute tour")
	blocks := shBlocks(tour)
	if len(blocks) < 4 {
		t.Fatalf("the tour has %d sh blocks, want at least 4 (PUT, the ten checks, the 11th, rules list)", len(blocks))
	}

	// The rule is 10 a minute: a token comes back every 6 s. The 11th
	// call is denied, as the README shows, when the ten before it and it
	// come within 6 s; a machine too slow for that gets the tour again,
	// on a new sluice, at most three times.
	for attempt := 1; ; attempt++ {
		errs, took, data := runTour(t, blocks)
		if len(errs) == 0 {
			// "Another caller has its own bucket ({"user": "bob"} passes)".
			var a checkAnswer
			do(t, "POST", "http://127.0.0.1:"+strconv.Itoa(data)+"/ratelimit/check", map[string]any{"user": "bob", "endpoint": "GET /api/orders"}, &a)
			if !a.Allowed {
				t.Errorf("bob after alice's 11 calls: %+v, want allowed", a)
			}
			return
		}
		if took < 6*time.Second || attempt == 3 {
			for _, err := range errs {
				t.Error(err)
			}
			if took >= 6*time.Second {
				t.Errorf("the ten checks and the 11th took %s, more than the 6 s in which the README's answers hold, in each of 3 tours", took)
			}
			return
		}
		t.Logf("tour %d: the ten checks and the 11th took %s, more than 6 s (a token came back): again", attempt, took)
	}
}

// runTour starts sluice as the tour starts it and runs the tour's blocks,
// returning each difference from what the README shows, how long the
// blocks from the ten checks to the 11th call took, and the data port.
func runTour(t *testing.T, blocks []shBlock) (errs []error, took time.Duration, data int) {
	t.Helper()
	dir := t.TempDir()
	data = listentest.FreePort(t)
	admin := listentest.FreePort(t)
	// The tour's own start: default flags, only the ports moved off the
	// defaults so that the test can run beside a real sluice.
	cmd := exec.Command(binary, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(data),
		"--admin-listen", "127.0.0.1:"+strconv.Itoa(admin), "--grpc-listen", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sluice serve:\n%s", log.String())
		}
	})
	waitFor(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(data) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if b, err := os.ReadFile(dir + "/sluice-rules.yaml"); err != nil || !bytes.Contains(b, []byte("#")) {
		t.Fatalf("the tour says sluice creates sluice-rules.yaml with a commented example: %q, %v", b, err)
	}

	var checks time.Time
	for i, b := range blocks {
		start := time.Now()
		script := strings.NewReplacer(
			"localhost:8080", "127.0.0.1:"+strconv.Itoa(data),
			"localhost:9090", "127.0.0.1:"+strconv.Itoa(admin),
			"go run ./cmd/sluice", binary,
		).Replace(b.script)
		sh := exec.Command("bash", "-euo", "pipefail", "-c", script)
		sh.Dir = dir
		sh.Env = append(cleanEnv(), "SLUICE_ADMIN=http://127.0.0.1:"+strconv.Itoa(admin))
		out, err := sh.Output()
		if err != nil {
			t.Fatalf("tour block %d:\n%s\nfailed: %v\n%s", i+1, b.script, err, out)
		}
		got := strings.Split(strings.TrimSuffix(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n"), "\n")
		if err := matchLines(b.want, got, time.Now()); err != nil {
			errs = append(errs, fmt.Errorf("tour block %d:\n%s\nprints:\n%s\nwhich is not what the README shows:\n%s\n%v",
				i+1, b.script, out, strings.Join(b.want, "\n"), err))
		}
		switch i {
		case 1: // the ten checks
			checks = start
		case 2: // the 11th
			took = time.Since(checks)
		}
	}

	// "The rule is now in sluice-rules.yaml too".
	if b, _ := os.ReadFile(dir + "/sluice-rules.yaml"); !bytes.Contains(b, []byte("free-per-user")) {
		errs = append(errs, fmt.Errorf("sluice-rules.yaml after the tour does not hold free-per-user:\n%s", b))
	}
	return errs, took, data
}

// cleanEnv is the environment without SLUICE_ variables, which would
// change what the commands do.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return env
}

// section returns the Markdown section that starts with heading, up to the
// next heading of the same level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no %q in the README", heading)
	}
	rest := doc[i+1+len(heading):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

type shBlock struct {
	script string   // the lines that are not comments
	want   []string // the comment lines, "# " taken off
}

// shBlocks returns the ```sh blocks of md: the commands, and the output
// shown as comments under them.
func shBlocks(md string) []shBlock {
	var blocks []shBlock
	var cur *shBlock
	for _, line := range strings.Split(md, "\n") {
		switch {
		case cur == nil && line == "```sh":
			cur = &shBlock{}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil && strings.HasPrefix(line, "#"):
			cur.want = append(cur.want, strings.TrimPrefix(strings.TrimPrefix(line, "#"), " "))
		case cur != nil:
			cur.script += line + "\n"
		}
	}
	return blocks
}

// transportHeaders are the headers curl -i prints that the README leaves out.
var transportHeaders = regexp.MustCompile(`^(Content-Type|Content-Length|Date): `)

// matchLines matches the output got against the documented lines want.
func matchLines(want, got []string, now time.Time) error {
	if len(want) > 0 && want[0] == "..." {
		for j := range len(got) + 1 {
			if matchLines(want[1:], got[j:], now) == nil {
				return nil
			}
		}
		return fmt.Errorf("no run of the output lines matches %q", want[1:])
	}
	inHeaders := false
	j := 0
	for i, w := range want {
		if w == "..." {
			for k := j; k <= len(got); k++ {
				if matchLines(want[i+1:], got[k:], now) == nil {
					return nil
				}
			}
			return fmt.Errorf("after line %d, no run of the output lines matches %q", i, want[i+1:])
		}
		for inHeaders && j < len(got) && transportHeaders.MatchString(got[j]) {
			j++
		}
		if j >= len(got) {
			return fmt.Errorf("line %d %q: the output has only %d lines", i+1, w, len(got))
		}
		if err := matchLine(w, got[j], now); err != nil {
			return fmt.Errorf("line %d: %v", i+1, err)
		}
		switch {
		case strings.HasPrefix(w, "HTTP/"):
			inHeaders = true
		case w == "":
			inHeaders = false
		}
		j++
	}
	if j != len(got) {
		return fmt.Errorf("%d more output lines than documented: %q", len(got)-j, got[j:])
	}
	return nil
}

var digits = regexp.MustCompile(`[0-9]+`)

// volatile are the numbers that depend on the clock, by the text before
// them, with the range a rule of 10 calls a minute allows them.
var volatile = []struct {
	before   string
	min, max func(doc int64, now time.Time) int64
}{
	{`"reset_after_ms":`, zero, func(int64, time.Time) int64 { return 60000 }},
	{`"retry_after_ms":`, func(doc int64, _ time.Time) int64 { return min(doc, 1) }, func(int64, time.Time) int64 { return 6000 }},
	{`;t=`, zero, func(int64, time.Time) int64 { return 60 }},
	{`Retry-After: `, func(int64, time.Time) int64 { return 1 }, func(int64, time.Time) int64 { return 6 }},
	{`X-Ratelimit-Reset: `, func(_ int64, now time.Time) int64 { return now.Unix() - 1 }, func(_ int64, now time.Time) int64 { return now.Unix() + 61 }},
}

func zero(int64, time.Time) int64 { return 0 }

// matchLine matches one output line against one documented line: the same
// text around the numbers, the same numbers but for the volatile ones.
func matchLine(want, got string, now time.Time) error {
	locs := digits.FindAllStringIndex(want, -1)
	var re strings.Builder
	re.WriteString("^")
	prev := 0
	for _, l := range locs {
		re.WriteString(regexp.QuoteMeta(want[prev:l[0]]))
		re.WriteString("([0-9]+)")
		prev = l[1]
	}
	re.WriteString(regexp.QuoteMeta(want[prev:]) + "$")
	m := regexp.MustCompile(re.String()).FindStringSubmatch(got)
	if m == nil {
		return fmt.Errorf("got %q, want %q", got, want)
	}
	for k, l := range locs {
		doc, _ := strconv.ParseInt(want[l[0]:l[1]], 10, 64)
		n, err := strconv.ParseInt(m[k+1], 10, 64)
		if err != nil {
			return fmt.Errorf("got %q: %v", got, err)
		}
		exact := true
		for _, v := range volatile {
			if strings.HasSuffix(want[:l[0]], v.before) {
				exact = false
				if lo, hi := v.min(doc, now), v.max(doc, now); n < lo || n > hi {
					return fmt.Errorf("got %q: %s%d, want %d … %d (documented: %d)", got, v.before, n, lo, hi, doc)
				}
			}
		}
		if exact && n != doc {
			return fmt.Errorf("got %q, want %q", got, want)
		}
	}
	return nil
}

// TestHTTPDecisionsCounted: sluice_decisions_total counts the decisions of
// POST /ratelimit/check too, as docs/envoy.md's table says, and an answer
// with no matching rule is what the README says: allowed, rule and client
// null, limit 0, and none of the quota headers.
func TestHTTPDecisionsCounted(t *testing.T) {
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"))
	var a map[string]any
	resp := do(t, "POST", in.data+"/ratelimit/check", map[string]any{"user": "alice"}, &a)
	if a["allowed"] != true || a["rule"] != nil || a["client"] != nil || a["limit"] != float64(0) {
		t.Errorf("no matching rule: %v, want allowed, rule and client null, limit 0", a)
	}
	for _, h := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit", "Ratelimit-Policy", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("no matching rule: %s: %s, want no quota header", h, v)
		}
	}
	in.putRule(t, map[string]any{"id": "per-user", "limit": 10, "window": "1m"})
	for range 3 {
		in.check(t, map[string]any{"user": "alice"})
	}
	fams := scrapeMetrics(t, in.data+"/metrics")
	if got := counterValue(fams["sluice_decisions_total"], map[string]string{"rule": "per-user", "outcome": "allowed"}); got != 3 {
		t.Errorf(`sluice_decisions_total{rule="per-user",outcome="allowed"} = %v after 3 HTTP decisions, want 3`, got)
	}
}
