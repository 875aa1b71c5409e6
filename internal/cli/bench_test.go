package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bench/loadgen"
)

// TestBench runs `sluice bench` against a real data plane with a rule that
// admits 5 calls an hour per client, so the allowed count is exact: 10
// clients × 5, less the one call bench makes before it starts.
func TestBench(t *testing.T) {
	s := startSluice(t, "")
	rulesFile := s.file(t, "bench.yaml", "rules:\n  - id: five\n    limit: 5\n    window: 1h\n")
	if code, _, errOut := sluice(t, "", "rules", "apply", "-f", rulesFile, "--admin", s.admin); code != 0 {
		t.Fatalf("rules apply: exit %d: %s", code, errOut)
	}

	t.Run("closed loop, request cap", func(t *testing.T) {
		code, out, errOut := sluice(t, "", "bench", "--target", s.data, "--requests", "1000", "--duration", "1m",
			"--clients", "10", "--concurrency", "4", "--json")
		if code != 0 {
			t.Fatalf("bench: exit %d: %s", code, errOut)
		}
		var rep map[string]any
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("bench --json printed %q: %v", out, err)
		}
		for k, want := range map[string]float64{"requests": 1000, "allowed": 49, "denied": 951, "errors": 0, "concurrency": 4, "rate": 0} {
			if got := rep[k]; got != want {
				t.Errorf("%s = %v, want %v", k, got, want)
			}
		}
		lat, _ := rep["latency_ms"].(map[string]any)
		for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
			if v, ok := lat[k].(float64); !ok || v <= 0 {
				t.Errorf("latency_ms.%s = %v, want a positive number", k, lat[k])
			}
		}
		if v, _ := rep["decisions_per_sec"].(float64); v <= 0 {
			t.Errorf("decisions_per_sec = %v, want > 0", rep["decisions_per_sec"])
		}
	})

	t.Run("fixed rate, by ip", func(t *testing.T) {
		code, out, errOut := sluice(t, "", "bench", "--target", s.data, "--rate", "1000", "--duration", "200ms",
			"--ip", "--clients", "1000", "--concurrency", "4", "--json")
		if code != 0 {
			t.Fatalf("bench: exit %d: %s", code, errOut)
		}
		var rep struct {
			Requests, Allowed, Denied, Errors, Missed int64
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("bench --json printed %q: %v", out, err)
		}
		// 200 calls are due; on a loaded machine some may not go out.
		if rep.Requests+rep.Missed != 200 || rep.Requests == 0 || rep.Errors != 0 || rep.Allowed+rep.Denied != rep.Requests {
			t.Errorf("bench = %+v, want 200 calls due, all made or missed, none failed", rep)
		}
	})

	t.Run("a target that is not sluice fails at once", func(t *testing.T) {
		code, _, errOut := sluice(t, "", "bench", "--target", s.admin, "--duration", "1m")
		if want := "does not answer checks"; code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("bench against the admin API: exit %d, stderr %q; want 1 and %q", code, errOut, want)
		}
	})
}

func TestBenchReportText(t *testing.T) {
	res := &loadgen.Result{Requests: 4, Allowed: 3, Denied: 1, Elapsed: 2 * time.Second}
	for _, ms := range []float64{0.1, 0.2, 0.3, 4} {
		res.Latency.Record(time.Duration(ms * float64(time.Millisecond)))
	}
	rep := newBenchReport(benchFlags{concurrency: 2, rate: 2, target: "http://127.0.0.1:8080"}, res)
	var b strings.Builder
	if err := rep.writeText(&b); err != nil {
		t.Fatal(err)
	}
	// p50 is the upper end of 200µs's histogram bucket, 0.4% above it.
	want := "" +
		"decisions   4 in 2.00s: 2 decisions/s\n" +
		"outcomes    3 allowed, 1 denied, 0 errors\n" +
		"latency     p50 0.201ms  p90 4.000ms  p99 4.000ms  p99.9 4.000ms  max 4.000ms\n"
	if got := b.String(); got != want {
		t.Errorf("writeText() =\n%s\nwant\n%s", got, want)
	}

	res.Late, res.Missed = 3, 5
	b.Reset()
	newBenchReport(benchFlags{rate: 2}, res).writeText(&b)
	if want := "could not keep --rate 2: 3 calls sent late"; !strings.Contains(b.String(), want) {
		t.Errorf("writeText() =\n%s\nwant it to contain %q", b.String(), want)
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		url  string
		want bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://localhost:8080", true},
		{"http://[::1]:8080", true},
		{"http://10.0.0.1:8080", false},
		{"https://api.example.com", false},
	}
	for _, tt := range tests {
		if got := isLoopback(tt.url); got != tt.want {
			t.Errorf("isLoopback(%q) = %v, want %v", tt.url, got, tt.want)
		}
	}
}
