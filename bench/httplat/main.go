// Command httplat measures the latency of plain GET calls at a fixed rate,
// side by side against several targets (bench/gateway.sh: the upstream
// directly and through sluice gateway). It runs the targets in turn for
// several rounds, so that drift on a shared machine hits all alike, and
// prints each round's percentiles, the median of each across rounds, and
// what every target adds over the first one.
//
// Latency is taken from the moment a call was scheduled (internal/bench/loadgen:
// no coordinated omission). With -clients N, each call carries
// X-Forwarded-For: 10.x.y.z, one of N addresses, so that a gateway that
// trusts the load generator (--trusted-proxies 127.0.0.1) keys each call by
// that address and the calls spread over N buckets.
//
//	httplat -rate 2000 -duration 10s -rounds 3 direct=http://127.0.0.1:18100/api/orders gateway=http://127.0.0.1:18000/api/orders
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bench/loadgen"
)

type target struct{ name, url string }

// quantiles reported, and their labels.
var quantiles = []struct {
	q    float64
	name string
}{{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}, {0.999, "p99.9"}}

// round is one target's run in one round.
type round struct {
	Target  string             `json:"target"`
	Round   int                `json:"round"`
	Calls   int64              `json:"calls"`
	Errors  int64              `json:"errors"`
	Late    int64              `json:"late"`
	Missed  int64              `json:"missed"`
	Rate    float64            `json:"rate"`
	Latency map[string]float64 `json:"latency_us"`
}

func main() {
	rate := flag.Float64("rate", 2000, "calls per second, in total, for each target")
	duration := flag.Duration("duration", 10*time.Second, "length of each target's run in each round")
	rounds := flag.Int("rounds", 3, "rounds (each runs every target once, in turn)")
	conc := flag.Int("concurrency", 16, "workers (keep-alive connections) per run")
	clients := flag.Int("clients", 0, "when > 0, send X-Forwarded-For with one of this many addresses")
	warmup := flag.Duration("warmup", time.Second, "unmeasured run against each target before the first round")
	jsonOut := flag.Bool("json", false, "print the rounds and medians as JSON")
	flag.Parse()
	var targets []target
	for _, a := range flag.Args() {
		name, url, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(url, "http://") {
			log.Fatalf("httplat: target %q: want name=http://host:port/path", a)
		}
		targets = append(targets, target{name, url})
	}
	if len(targets) == 0 {
		log.Fatal("httplat: no targets (name=URL ...)")
	}
	var xff []string
	for i := range *clients {
		xff = append(xff, fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff))
	}

	ctx := context.Background()
	run := func(t target, d time.Duration) *loadgen.Result {
		u, err := url.Parse(t.url)
		if err != nil {
			log.Fatalf("httplat: %s: %v", t.url, err)
		}
		head := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: httplat\r\n"
		var conns []*loadgen.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		res, err := loadgen.Run(ctx, loadgen.Config{
			Concurrency: *conc,
			Duration:    d,
			Rate:        *rate,
			NewCall: func(worker int) loadgen.Call {
				rng := rand.New(rand.NewPCG(uint64(worker), 42))
				conn, err := loadgen.NewConn(t.url, 10*time.Second)
				if err != nil {
					log.Fatal(err)
				}
				conns = append(conns, conn)
				var req []byte
				return func(ctx context.Context) (bool, error) {
					req = append(req[:0], head...)
					if len(xff) > 0 {
						req = append(req, "X-Forwarded-For: "...)
						req = append(req, xff[rng.IntN(len(xff))]...)
						req = append(req, "\r\n"...)
					}
					req = append(req, "\r\n"...)
					status, _, err := conn.Do(ctx, req)
					switch {
					case err != nil:
						return false, err
					case status == http.StatusOK:
						return true, nil
					case status == http.StatusTooManyRequests:
						return false, nil
					}
					return false, fmt.Errorf("httplat: %d %s", status, http.StatusText(status))
				}
			},
		})
		if err != nil {
			log.Fatal(err)
		}
		return res
	}

	for _, t := range targets {
		run(t, *warmup)
	}
	var all []round
	for r := 1; r <= *rounds; r++ {
		for _, t := range targets {
			res := run(t, *duration)
			rd := round{Target: t.name, Round: r, Calls: res.Requests, Errors: res.Errors + res.Denied,
				Late: res.Late, Missed: res.Missed, Rate: res.PerSecond(), Latency: map[string]float64{}}
			for _, q := range quantiles {
				rd.Latency[q.name] = us(res.Latency.Quantile(q.q))
			}
			all = append(all, rd)
			if !*jsonOut {
				fmt.Printf("round %d %-16s %7.0f calls/s  p50 %7.1f µs  p90 %7.1f µs  p99 %7.1f µs  p99.9 %8.1f µs  errors+denied %d  late %d  missed %d\n",
					r, t.name, rd.Rate, rd.Latency["p50"], rd.Latency["p90"], rd.Latency["p99"], rd.Latency["p99.9"], rd.Errors, rd.Late, rd.Missed)
				if res.FirstErr != nil {
					fmt.Printf("    first error: %v\n", res.FirstErr)
				}
			}
		}
	}

	// Medians across rounds, and what each target adds over the first.
	med := map[string]map[string]float64{}
	for _, t := range targets {
		med[t.name] = map[string]float64{}
		for _, q := range quantiles {
			var v []float64
			for _, rd := range all {
				if rd.Target == t.name {
					v = append(v, rd.Latency[q.name])
				}
			}
			med[t.name][q.name] = median(v)
		}
	}
	if *jsonOut {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"rate": *rate, "duration": duration.String(), "rounds": all, "median_us": med})
		return
	}
	base := targets[0].name
	fmt.Printf("median of %d rounds at %.0f calls/s (µs):\n", *rounds, *rate)
	for _, t := range targets {
		var b strings.Builder
		for _, q := range quantiles {
			fmt.Fprintf(&b, "  %s %7.1f", q.name, med[t.name][q.name])
			if t.name != base {
				fmt.Fprintf(&b, " (+%s)", strconv.FormatFloat(med[t.name][q.name]-med[base][q.name], 'f', 1, 64))
			}
		}
		fmt.Printf("  %-16s%s\n", t.name, b.String())
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
