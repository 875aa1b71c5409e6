// Command envoydiff sends the same ShouldRateLimit sequences to two
// services of Envoy's rate limit API — envoyproxy/ratelimit and sluice,
// both on one Redis and one runtime configuration — and compares every
// answer field by field: overall_code, each status's code, current_limit,
// limit_remaining and duration_until_reset (within a second), the headers
// to add, the body and the metadata.
//
//	envoydiff -write-config /tmp/rt          # the runtime directory both serve
//	envoydiff -a 127.0.0.1:8081 -b 127.0.0.1:9081
//
// The sequences (scenario.go) are envoyproxy/ratelimit's integration
// scenarios — its test/integration tests and integration-test scripts —
// and wildcards, shadow mode, replaces, share_threshold, hits_addend 0 and
// above 1, several descriptors, every unit, empty values, empty
// descriptors and charges after the response. Each call goes to -a, then
// to -b, before the next. A scenario starts at least 8 s before the end of
// a minute (and at the start of a second when it depends on a per-second
// window), so that its calls fall in one window of each unit on both.
//
// Values under keys without a fixed value are made unique by -run, so a
// second run on the same Redis starts from fresh counters there; the fixed
// values of the configuration (source_cluster: proxy …) need freshly
// started services on a flushed Redis. The two services must not share
// counters: envoyproxy/ratelimit's and sluice's Redis keys never overlap.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	var (
		a        = flag.String("a", "", "the first service's gRPC address (envoyproxy/ratelimit)")
		b        = flag.String("b", "", "the second service's gRPC address (sluice)")
		aName    = flag.String("a-name", "envoyproxy", "the first service's name in the report")
		bName    = flag.String("b-name", "sluice", "the second service's name in the report")
		write    = flag.String("write-config", "", "write the runtime directory (DIR/ratelimit/config) and exit")
		run      = flag.String("run", "", "what makes this run's values unique (default: the time)")
		only     = flag.String("only", "", "run only the scenarios whose name contains this")
		all      = flag.Bool("v", false, "print every call, not only those that differ")
		jsonPath = flag.String("json", "", "also write the results as JSON to this file")
	)
	flag.Parse()
	if *write != "" {
		if err := writeConfig(*write); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *a == "" || *b == "" {
		log.Fatal("envoydiff: -a and -b: want both gRPC addresses (or -write-config DIR)")
	}
	if *run == "" {
		*run = fmt.Sprint(time.Now().Unix())
	}
	ca, cb := client(*a), client(*b)
	var list []scenario
	for _, s := range scenarios(*run) {
		if strings.Contains(s.name, *only) {
			list = append(list, s)
		}
	}
	results := runAll(context.Background(), ca, cb, list, waitForWindow)
	report(os.Stdout, results, *aName, *bName, *all)
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*jsonPath, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

func client(addr string) rlsv3.RateLimitServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	return rlsv3.NewRateLimitServiceClient(conn)
}

// callResult is one call of a scenario, as both answered it.
type callResult struct {
	Call    int      `json:"call"`
	Request string   `json:"request"`
	A       string   `json:"a"`
	B       string   `json:"b"`
	Diffs   []string `json:"diffs,omitempty"`
}

type scenarioResult struct {
	Name  string       `json:"name"`
	From  string       `json:"from"`
	Calls []callResult `json:"calls"`
}

// runAll runs each scenario, each call to a and then b. align is called
// before each scenario (the test passes one that does not wait).
func runAll(ctx context.Context, a, b rlsv3.RateLimitServiceClient, list []scenario, align func(second bool)) []scenarioResult {
	var out []scenarioResult
	for _, s := range list {
		align(s.second)
		r := scenarioResult{Name: s.name, From: s.from}
		for i, c := range s.calls {
			if c.wait > 0 {
				time.Sleep(c.wait)
			}
			ansA, ansB := ask(ctx, a, c.req), ask(ctx, b, c.req)
			r.Calls = append(r.Calls, callResult{Call: i + 1, Request: requestString(c.req),
				A: answerString(ansA), B: answerString(ansB), Diffs: compare(ansA, ansB)})
		}
		out = append(out, r)
	}
	return out
}

func ask(ctx context.Context, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) answer {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	return answer{resp: resp, err: err}
}

// waitForWindow waits until at least 8 s remain in the current minute and,
// for a scenario on a per-second window, until the start of a second.
func waitForWindow(second bool) {
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < 8*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
	if second {
		now = time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now) + 5*time.Millisecond)
	}
}

func requestString(r *rlsv3.RateLimitRequest) string {
	var ds []string
	for _, d := range r.Descriptors {
		var es []string
		for _, e := range d.Entries {
			es = append(es, e.Key+"="+e.Value)
		}
		s := "(" + strings.Join(es, ",") + ")"
		if d.HitsAddend != nil {
			s += fmt.Sprintf("×%d", d.HitsAddend.Value)
		}
		if d.Limit != nil {
			s += fmt.Sprintf(" limit %d/%v", d.Limit.RequestsPerUnit, d.Limit.Unit)
		}
		ds = append(ds, s)
	}
	out := fmt.Sprintf("%q %s", r.Domain, strings.Join(ds, " "))
	if r.HitsAddend != 0 {
		out += fmt.Sprintf(" hits_addend %d", r.HitsAddend)
	}
	return out
}

// report prints each scenario's count of identical calls and every call
// that differs, then the totals.
func report(w io.Writer, results []scenarioResult, aName, bName string, all bool) {
	same, total := 0, 0
	for _, s := range results {
		n := 0
		for _, c := range s.Calls {
			if len(c.Diffs) == 0 {
				n++
			}
		}
		same, total = same+n, total+len(s.Calls)
		fmt.Fprintf(w, "== %s (%s): %d of %d identical\n", s.Name, s.From, n, len(s.Calls))
		for _, c := range s.Calls {
			if len(c.Diffs) == 0 && !all {
				continue
			}
			fmt.Fprintf(w, "  call %d %s\n    %-10s %s\n    %-10s %s\n", c.Call, c.Request, aName, c.A, bName, c.B)
			for _, d := range c.Diffs {
				fmt.Fprintf(w, "    differs %s\n", d)
			}
		}
	}
	fmt.Fprintf(w, "== total: %d calls, %d identical, %d different\n", total, same, total-same)
}
