// Package e2e runs the sluice binary as users do: real processes, real HTTP,
// a real rules file, and real redis-server processes started by the tests.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/sluice")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// instance is one `sluice serve` process.
type instance struct {
	t         testing.TB
	args      []string
	rules     string
	data      string // http://127.0.0.1:port
	admin     string
	cmd       *exec.Cmd
	log       *bytes.Buffer
	exited    chan struct{}
	dataPort  int
	adminPort int
	// freshPorts: the ports were picked free for this instance, so a
	// start that finds one taken meanwhile may pick others.
	freshPorts bool
}

// serve starts `sluice serve` with a rules file at rulesPath (created by
// sluice when missing) and extra flags, and waits until it is healthy.
func serve(t testing.TB, rulesPath string, extra ...string) *instance {
	t.Helper()
	in := &instance{t: t, rules: rulesPath, dataPort: listentest.FreePort(t), adminPort: listentest.FreePort(t), args: extra, freshPorts: true}
	in.start()
	in.freshPorts = false
	t.Cleanup(in.stop)
	return in
}

func (in *instance) start() {
	in.t.Helper()
	tries := 0
start:
	in.data = "http://127.0.0.1:" + strconv.Itoa(in.dataPort)
	in.admin = "http://127.0.0.1:" + strconv.Itoa(in.adminPort)
	// gRPC on a free port (the default :8081 would collide between
	// instances); a test's own --grpc-listen, later, wins.
	args := append([]string{"serve",
		"--listen", "127.0.0.1:" + strconv.Itoa(in.dataPort),
		"--admin-listen", "127.0.0.1:" + strconv.Itoa(in.adminPort),
		"--grpc-listen", "127.0.0.1:0",
		"--rules", in.rules, "--rules-poll", "100ms",
	}, in.args...)
	in.cmd = exec.Command(binary, args...)
	in.log = &bytes.Buffer{}
	in.cmd.Stdout, in.cmd.Stderr = in.log, in.log
	if err := in.cmd.Start(); err != nil {
		in.t.Fatal(err)
	}
	in.exited = make(chan struct{})
	go func() { in.cmd.Wait(); close(in.exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(in.data + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-in.exited:
			// A port picked free can be taken by another process before
			// sluice binds it: pick others, a few times, on a first start.
			if in.freshPorts && tries < 3 && strings.Contains(in.log.String(), "address already in use") {
				tries++
				in.dataPort, in.adminPort = listentest.FreePort(in.t), listentest.FreePort(in.t)
				goto start
			}
			in.t.Fatalf("sluice serve exited: %s", in.log)
		default:
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("sluice serve not healthy after 20s: %s", in.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process with SIGTERM (and SIGKILL after 10 s).
func (in *instance) stop() {
	if in.cmd == nil || in.cmd.Process == nil {
		return
	}
	in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
	case <-time.After(10 * time.Second):
		in.cmd.Process.Kill()
		<-in.exited
	}
}

func (in *instance) restart() {
	in.t.Helper()
	in.stop()
	in.start()
}

// do sends a JSON request and decodes a JSON answer into out (if not nil).
func do(t testing.TB, method, url string, body any, out any) *http.Response {
	t.Helper()
	return doWith(t, method, url, body, out)
}

// doWith is do with request headers (name, value pairs).
func doWith(t testing.TB, method, url string, body, out any, header ...string) *http.Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp
}

// checkAnswer is the decoded body of a check answer, read as the client
// reads it.
type checkAnswer = client.CheckResponse

func (in *instance) check(t testing.TB, req map[string]any) (checkAnswer, http.Header) {
	t.Helper()
	var a checkAnswer
	resp := do(t, "POST", in.data+"/ratelimit/check", req, &a)
	if resp.StatusCode != 200 {
		t.Fatalf("check %v: status %d", req, resp.StatusCode)
	}
	return a, resp.Header
}

func (in *instance) putRule(t testing.TB, rule map[string]any) {
	t.Helper()
	resp := do(t, "PUT", in.admin+"/rules/"+rule["id"].(string), rule, nil)
	if resp.StatusCode != 200 && resp.StatusCode != 201 {
		t.Fatalf("PUT rule %v: status %d", rule, resp.StatusCode)
	}
}
