package cli

import (
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// TestSIGHUPCaughtFromReady: from the moment sluice says READY=1, a
// SIGHUP (systemctl reload) reloads the rules file; it never meets the
// signal's default action, which ends the process. The hook edits the
// rules file and sends the signal just before READY=1 goes out, the
// earliest a service manager could send it: without the handler in place
// this test's process dies ("signal: hangup").
func TestSIGHUPCaughtFromReady(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", "rules: []\n")
	testHookReady = func() {
		os.WriteFile(rules, []byte("rules:\n  - {id: one-a-minute, by: user, limit: 1, window: 1m}\n"), 0o644)
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		time.Sleep(100 * time.Millisecond) // the signal is delivered meanwhile
	}
	t.Cleanup(func() { testHookReady = nil })
	data := listentest.FreeAddr(t)
	s := start(t, "serve", "--rules", rules, "--rules-poll", "1h", "--listen", data,
		"--admin-listen", listentest.FreeAddr(t), "--grpc-listen", "")
	s.waitUp(t, http.DefaultClient, "http://"+data+"/healthz")
	var last []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Post("http://"+data+"/ratelimit/check", "application/json", strings.NewReader(`{"user": "alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		last, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(last), `"rule":"one-a-minute"`) {
			return
		}
	}
	t.Errorf("check 10 s after a SIGHUP at READY=1 = %s, want the rule written before it (poll: 1h)", last)
}
