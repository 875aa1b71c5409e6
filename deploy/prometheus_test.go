package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// ruleGroups is a Prometheus rules file (and a PrometheusRule's spec).
type ruleGroups struct {
	Groups []struct {
		Name  string `yaml:"name" json:"name"`
		Rules []struct {
			Record      string            `yaml:"record,omitempty" json:"record,omitempty"`
			Alert       string            `yaml:"alert,omitempty" json:"alert,omitempty"`
			Expr        string            `yaml:"expr" json:"expr"`
			For         string            `yaml:"for,omitempty" json:"for,omitempty"`
			Labels      map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
			Annotations map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
		} `yaml:"rules" json:"rules"`
	} `yaml:"groups" json:"groups"`
}

func readRuleGroups(t *testing.T) ruleGroups {
	t.Helper()
	data, err := os.ReadFile("prometheus/sluice-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var g ruleGroups
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&g); err != nil {
		t.Fatalf("prometheus/sluice-rules.yaml: %v", err)
	}
	return g
}

// dashboardExprs returns every PromQL expression of the Grafana
// dashboard: its panels' targets and its variables' queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/sluice-dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			exprs = append(exprs, v.Definition)
		}
	}
	if len(exprs) < 15 {
		t.Fatalf("the dashboard has %d queries: not the one this test knows", len(exprs))
	}
	return exprs
}

var (
	metricName   = regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	recordedName = regexp.MustCompile(`\bsluice:[a-z0-9_:]+`)
)

// exported starts sluice as deployments run it — once on the embedded
// store, once on Redis, which is then killed — drives it through every
// kind of answer (allowed, denied, shadow-denied, malformed, decided
// while Redis is down), and returns the metric families its /metrics
// exposes, by name, with their type.
func exported(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(`rules:
  - {id: two-per-user, by: user, limit: 2, window: 1m}
  - {id: shadow-one, by: user, limit: 1, window: 1m, shadow: true}
`), 0o644)
	families := map[string]string{}
	round := 0
	scrape := func(data string) {
		// A new user each round: a user Redis denied is denied locally
		// (no store call) until its wait is over.
		round++
		user := fmt.Sprintf(`{"user": "u%d"}`, round)
		for i, body := range []string{user, user, user, `{"cost": 0, "user": "alice"}`} {
			resp, err := http.Post("http://"+data+"/ratelimit/check", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatalf("check %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		resp, err := http.Get("http://" + data + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
				families[f[2]] = f[3]
			}
		}
	}

	mem := freeAddr(t)
	startSluice(t, "http://"+mem+"/healthz", "serve", "--listen", mem, "--admin-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--rules", rulesPath)
	scrape(mem)

	rds := redistest.Start(t)
	shared := freeAddr(t)
	log := startSluice(t, "http://"+shared+"/healthz", "serve", "--listen", shared, "--admin-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--rules", rulesPath, "--redis", rds.Addr())
	scrape(shared)
	rds.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for families["sluice_store_errors_total"] == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no sluice_store_errors_total 20s after Redis was killed:\n%s", log)
		}
		scrape(shared)
		time.Sleep(100 * time.Millisecond)
	}
	return families
}

// TestMetricsExist checks that every metric the alert rules and the
// dashboard query is one a running sluice exports (a histogram's
// _bucket, _sum and _count included), and that every recorded series
// they use is recorded by the rules file: a renamed metric would leave
// an alert that never fires and a panel that stays empty.
func TestMetricsExist(t *testing.T) {
	groups := readRuleGroups(t)
	recorded := map[string]bool{}
	type use struct{ where, expr string }
	var uses []use
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
			uses = append(uses, use{"prometheus/sluice-rules.yaml " + r.Record + r.Alert, r.Expr})
		}
	}
	for _, e := range dashboardExprs(t) {
		uses = append(uses, use{"grafana/sluice-dashboard.json", e})
	}

	families := exported(t)
	var names []string
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("exported: %s", strings.Join(names, " "))
	seen := map[string]bool{}
	for _, u := range uses {
		for _, m := range metricName.FindAllString(u.expr, -1) {
			seen[m] = true
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && families[b] == "histogram" {
					base = b
				}
			}
			if families[base] == "" {
				t.Errorf("%s: %s is not exported by sluice (in %s)", u.where, m, u.expr)
			}
		}
		for _, r := range recordedName.FindAllString(u.expr, -1) {
			if !recorded[r] {
				t.Errorf("%s: %s is recorded by no rule of prometheus/sluice-rules.yaml", u.where, r)
			}
		}
	}
	// Every sluice metric is watched somewhere (the Go runtime's are not).
	for _, n := range names {
		if strings.HasPrefix(n, "sluice_") && !seen[n] && !seen[n+"_bucket"] && !seen[n+"_count"] {
			t.Errorf("%s is exported but neither the alert rules nor the dashboard use it", n)
		}
	}
}

// TestAlertRules runs promtool's checks and the rules' unit tests
// (prometheus/sluice-rules.test.yaml: each alert fires on what it is
// for, and none on a healthy instance).
func TestAlertRules(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("promtool is not installed (./scripts/test.sh installs Debian's prometheus package, which has it; it could not here)")
	}
	for _, args := range [][]string{
		{"check", "rules", "sluice-rules.yaml"},
		{"test", "rules", "sluice-rules.test.yaml"},
	} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert is tested: named in the test file.
	tests, _ := os.ReadFile("prometheus/sluice-rules.test.yaml")
	for _, g := range readRuleGroups(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no test firing it in prometheus/sluice-rules.test.yaml", r.Alert)
			}
		}
	}
}
