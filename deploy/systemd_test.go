package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit checks deploy/systemd/sluice.service: systemd-analyze
// verify finds nothing to say (an unknown or misspelt key is only a
// warning there, so any output fails the test), its offline security
// review rates the exposure 2.0 or less, the hardening the docs promise
// is there, and ExecStart and every SLUICE_ variable are ones sluice
// takes. ExecStart is pointed at the binary built here, which verify
// requires to exist.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("systemd/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = append(keys[k], v)
		}
	}
	for k, want := range map[string]string{
		"Type": "notify", "DynamicUser": "yes", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "",
		"ProtectSystem": "strict", "StateDirectory": "sluice", "ExecReload": "/bin/kill -HUP $MAINPID",
	} {
		if got := keys[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	exec0 := strings.Fields(keys["ExecStart"][0])
	if exec0[0] != "/usr/local/bin/sluice" {
		t.Errorf("ExecStart runs %s, want /usr/local/bin/sluice (as the docs install it)", exec0[0])
	}
	var env []string
	for _, e := range keys["Environment"] {
		env = append(env, strings.Fields(e)...)
	}
	checkCommand(t, "sluice.service", exec0[1:], env)

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (./scripts/test.sh installs systemd from Debian's packages; it could not here)")
	}
	path := filepath.Join(t.TempDir(), "sluice.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/sluice", binary)), 0o644)
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", "--threshold=20", path).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security --offline=yes --threshold=20 (exposure at most 2.0): %v\n%s", err, out)
	}
	if i := strings.Index(string(out), "Overall exposure level"); i >= 0 {
		t.Logf("systemd-analyze security: %s", strings.TrimSpace(string(out[i:])))
	}
}
