package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluicehq/sluice/internal/rulecheck"
	"github.com/sluicehq/sluice/rules"
)

// kustomization is the part of a kustomization.yaml these files use.
type kustomization struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	Labels     []map[string]any    `json:"labels"`
	Resources  []string            `json:"resources"`
	Images     []map[string]string `json:"images"`
}

// strictDecode decodes one YAML document into out as the API server
// would take it: through JSON, any field the type does not have being an
// error.
func strictDecode(doc any, out any) error {
	js, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

// manifests is one shape's objects, decoded.
type manifests struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        []*policyv1.PodDisruptionBudget
	monitors    []*monitoringv1.ServiceMonitor
	promRules   []*monitoringv1.PrometheusRule
}

// loadShape reads dir's kustomization and decodes each resource it lists
// strictly into its Kubernetes type; a kind the test does not know fails.
func loadShape(t *testing.T, dir string) *manifests {
	t.Helper()
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	var k kustomization
	decodeFile(t, filepath.Join(dir, "kustomization.yaml"), func(doc any, _ string) {
		if err := strictDecode(doc, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
	})
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(k.Resources) != len(files)-1 {
		t.Errorf("%s: kustomization lists %d resources, the folder has %d other files", dir, len(k.Resources), len(files)-1)
	}
	for _, res := range k.Resources {
		path := filepath.Join(dir, res)
		decodeFile(t, path, func(doc any, kind string) {
			var err error
			switch kind {
			case "Deployment":
				var d appsv1.Deployment
				err = strictDecode(doc, &d)
				m.deployments = append(m.deployments, &d)
			case "Service":
				var s corev1.Service
				err = strictDecode(doc, &s)
				m.services = append(m.services, &s)
			case "ConfigMap":
				var c corev1.ConfigMap
				err = strictDecode(doc, &c)
				m.configMaps[c.Name] = &c
			case "Secret":
				var s corev1.Secret
				err = strictDecode(doc, &s)
				m.secrets[s.Name] = &s
			case "PodDisruptionBudget":
				var p policyv1.PodDisruptionBudget
				err = strictDecode(doc, &p)
				m.pdbs = append(m.pdbs, &p)
			case "ServiceMonitor":
				var s monitoringv1.ServiceMonitor
				err = strictDecode(doc, &s)
				m.monitors = append(m.monitors, &s)
			case "PrometheusRule":
				var r monitoringv1.PrometheusRule
				err = strictDecode(doc, &r)
				m.promRules = append(m.promRules, &r)
			default:
				t.Fatalf("%s: kind %q: the test does not know it", path, kind)
			}
			if err != nil {
				t.Errorf("%s (%s): %v", path, kind, err)
			}
		})
	}
	return m
}

// decodeFile calls fn with each YAML document of path and its kind.
func decodeFile(t *testing.T, path string, fn func(doc any, kind string)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc == nil {
			continue
		}
		kind, _ := doc["kind"].(string)
		fn(doc, kind)
	}
}

// checkPods checks what every Deployment of a shape must get right: the
// command line and variables sluice takes, probes on /healthz and
// /readyz of a declared port, non-root and read-only root, resources,
// topology spread, a PodDisruptionBudget and a Service that select its
// pods, the rules ConfigMap mounted as a directory (a subPath never sees
// updates) and holding valid rules, and Secrets whose keys sluice reads.
// probePort is the port whose /healthz and /readyz answer (serve's data
// port, the gateway's admin port).
func checkPods(t *testing.T, name string, m *manifests, probePort string) {
	t.Helper()
	if len(m.deployments) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", name, len(m.deployments))
	}
	d := m.deployments[0]
	pod := d.Spec.Template
	if sel, err := metav1LabelSelector(d.Spec.Selector); err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("%s: the Deployment's selector does not select its pods (%v)", name, err)
	}
	for _, s := range m.services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s: Service %s selects no pod of the Deployment", name, s.Name)
		}
	}
	if len(m.pdbs) != 1 {
		t.Errorf("%s: %d PodDisruptionBudgets, want 1", name, len(m.pdbs))
	}
	for _, p := range m.pdbs {
		if sel, err := metav1LabelSelector(p.Spec.Selector); err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s: PodDisruptionBudget %s does not select the pods", name, p.Name)
		}
	}
	if len(pod.Spec.TopologySpreadConstraints) == 0 {
		t.Errorf("%s: no topology spread", name)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: the pod does not require a non-root user", name)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", name, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: the container's root file system is not read-only, or it may escalate privileges", name)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: resources %v: want CPU and memory requests and a memory limit", name, c.Resources)
	}

	// The command line and every variable, literal or from a Secret.
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && m.secrets[r.SecretKeyRef.Name] == nil {
			t.Errorf("%s: %s comes from Secret %s, which the shape does not have", name, e.Name, r.SecretKeyRef.Name)
		}
	}
	for _, from := range c.EnvFrom {
		if from.SecretRef == nil {
			t.Errorf("%s: envFrom other than a Secret", name)
			continue
		}
		s := m.secrets[from.SecretRef.Name]
		if s == nil {
			t.Errorf("%s: envFrom Secret %s, which the shape does not have", name, from.SecretRef.Name)
			continue
		}
		for k := range s.StringData {
			env = append(env, k+"=")
		}
		for k := range s.Data {
			env = append(env, k+"=")
		}
	}
	args := append(append([]string{}, c.Command...), c.Args...)
	checkCommand(t, name, args, env)
	if c.TerminationMessagePolicy != "" {
		t.Logf("%s: terminationMessagePolicy %s", name, c.TerminationMessagePolicy)
	}

	// Probes: the right path on a declared port.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/healthz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", name, p.what)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Port != intstr.FromString(probePort) || ports[probePort] == 0 {
			t.Errorf("%s: %s probe GET %s on port %s, want %s on %s (a declared container port)", name, p.what, g.Path, g.Port.String(), p.path, probePort)
		}
	}
	if ls := c.Lifecycle; ls == nil || ls.PreStop == nil || ls.PreStop.Sleep == nil {
		t.Errorf("%s: no preStop sleep: the pod would stop serving before every proxy has dropped its endpoint", name)
	}
	for _, s := range m.services {
		for _, sp := range s.Spec.Ports {
			if ports[sp.TargetPort.String()] == 0 {
				t.Errorf("%s: Service %s port %s targets %s, not a container port", name, s.Name, sp.Name, sp.TargetPort.String())
			}
		}
	}

	// The rules: a ConfigMap mounted as a directory, at the path sluice
	// reads, holding rules sluice takes.
	var rulesPath string
	for _, e := range c.Env {
		if e.Name == "SLUICE_RULES" {
			rulesPath = e.Value
		}
	}
	found := false
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			cm := m.configMaps[v.ConfigMap.Name]
			if cm == nil {
				t.Errorf("%s: volume %s is ConfigMap %s, which the shape does not have", name, v.Name, v.ConfigMap.Name)
				continue
			}
			if vm.SubPath != "" {
				t.Errorf("%s: ConfigMap %s is mounted with subPath: it would never see an update", name, cm.Name)
			}
			key, ok := strings.CutPrefix(rulesPath, vm.MountPath+"/")
			if !ok {
				continue
			}
			found = true
			if _, err := rules.ParseYAML([]byte(cm.Data[key])); err != nil {
				t.Errorf("%s: ConfigMap %s key %s: %v", name, cm.Name, key, err)
			}
			findings, _ := rulecheck.Lint([]byte(cm.Data[key]))
			for _, f := range findings {
				t.Errorf("%s: ConfigMap %s key %s: sluice rules lint: %s", name, cm.Name, key, f)
			}
		}
	}
	if !found {
		t.Errorf("%s: SLUICE_RULES %q is not a key of a mounted ConfigMap", name, rulesPath)
	}
}

// metav1LabelSelector is metav1.LabelSelectorAsSelector.
func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

func TestKubernetesDecision(t *testing.T) {
	m := loadShape(t, "kubernetes/decision")
	checkPods(t, "kubernetes/decision", m, "http")
	if len(m.services) != 1 {
		t.Fatalf("%d Services, want 1", len(m.services))
	}
	got := map[string]int32{}
	for _, p := range m.services[0].Spec.Ports {
		got[p.Name] = p.Port
	}
	if !reflect.DeepEqual(got, map[string]int32{"http": 8080, "grpc": 8081}) {
		t.Errorf("Service ports %v, want http 8080 and grpc 8081 (the Envoy rate limit service)", got)
	}
}

func TestKubernetesGateway(t *testing.T) {
	m := loadShape(t, "kubernetes/gateway")
	checkPods(t, "kubernetes/gateway", m, "admin")
	c := m.deployments[0].Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		if e.Name == "SLUICE_UPSTREAM" && !strings.HasPrefix(e.Value, "http") {
			t.Errorf("SLUICE_UPSTREAM %q is not a URL", e.Value)
		}
	}
	// A non-loopback admin API needs a token: the Secret must carry the key.
	if _, ok := m.secrets["sluice-gateway"].StringData["SLUICE_ADMIN_TOKEN"]; !ok {
		t.Errorf("the gateway's Secret has no SLUICE_ADMIN_TOKEN, which its admin listener requires")
	}
}

// TestKubernetesMonitoring: the ServiceMonitor scrapes the decision
// Service's port by name, and the PrometheusRule holds the groups of
// deploy/prometheus/sluice-rules.yaml, word for word.
func TestKubernetesMonitoring(t *testing.T) {
	m := loadShape(t, "kubernetes/monitoring")
	dec := loadShape(t, "kubernetes/decision")
	if len(m.monitors) != 1 || len(m.promRules) != 1 {
		t.Fatalf("%d ServiceMonitors and %d PrometheusRules, want 1 and 1", len(m.monitors), len(m.promRules))
	}
	sm := m.monitors[0]
	svc := dec.services[0]
	sel, err := metav1LabelSelector(&sm.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor does not select Service %s", svc.Name)
	}
	for _, ep := range sm.Spec.Endpoints {
		if ep.Port != "http" || ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %s%s, want port http, /metrics", ep.Port, ep.Path)
		}
	}
	var fromFile, fromCR map[string]any
	data, _ := os.ReadFile("prometheus/sluice-rules.yaml")
	if err := yaml.Unmarshal(data, &fromFile); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile("kubernetes/monitoring/prometheusrule.yaml")
	if err := yaml.Unmarshal(data, &fromCR); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromFile)
	b, _ := json.Marshal(fromCR["spec"])
	if !bytes.Equal(a, b) {
		t.Errorf("the PrometheusRule's groups differ from prometheus/sluice-rules.yaml:\n%s\n%s", a, b)
	}
}

// TestConfigMapHotReload lays out a rules file as the kubelet mounts a
// ConfigMap — rules.yaml a link to ..data/rules.yaml, ..data a link to a
// timestamped directory — and updates it as the kubelet does (a new
// directory, ..data swapped to it by rename, the old one removed): the
// running sluice takes the new rules without a restart.
func TestConfigMapHotReload(t *testing.T) {
	dir := t.TempDir()
	version := func(name, body string) {
		os.Mkdir(filepath.Join(dir, name), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name, "rules.yaml"), []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_01_01_00_00_00.1", "rules:\n  - {id: before, by: user, limit: 5, window: 1m}\n")
	os.Symlink("..data/rules.yaml", filepath.Join(dir, "rules.yaml"))

	data := freeAddr(t)
	log := startSluice(t, "http://"+data+"/healthz", "serve", "--listen", data, "--admin-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--rules", filepath.Join(dir, "rules.yaml"))
	rule := func() string {
		resp, err := http.Post("http://"+data+"/ratelimit/check", "application/json", strings.NewReader(`{"user": "alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct{ Rule string }
		json.NewDecoder(resp.Body).Decode(&a)
		return a.Rule
	}
	if got := rule(); got != "before" {
		t.Fatalf("decided under %q, want before", got)
	}
	version("..2026_01_01_00_01_00.2", "rules:\n  - {id: after, by: user, limit: 5, window: 1m}\n")
	os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1"))
	deadline := time.Now().Add(15 * time.Second)
	for rule() != "after" {
		if time.Now().After(deadline) {
			t.Fatalf("the updated ConfigMap is not in force 15s later:\n%s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
