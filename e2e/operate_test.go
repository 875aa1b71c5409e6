package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// proc is a sluice process whose exit status a test reads.
type proc struct {
	cmd    *exec.Cmd
	log    *syncLog
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// syncLog is a process's output, safe to read while it writes.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProc starts the binary with args and env added to the test's own,
// and ends it with SIGKILL at cleanup if the test did not stop it.
func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), log: &syncLog{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitHealthy polls url until it answers 200.
func (p *proc) waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("sluice exited: %v\n%s", p.err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not 200 after 20s:\n%s", url, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitExit waits up to d for the process to exit and returns its error.
func (p *proc) waitExit(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(d):
		t.Fatalf("sluice still running %s after SIGTERM:\n%s", d, p.log)
		return nil
	}
}

// halfSent is a request whose headers and part of whose body have been
// sent: in flight, as far as the server knows.
type halfSent struct {
	conn net.Conn
	rest string
}

func sendHalf(t *testing.T, addr, head, body string) *halfSent {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	half := len(body) / 2
	if _, err := fmt.Fprintf(conn, "%sContent-Length: %d\r\n\r\n%s", head, len(body), body[:half]); err != nil {
		t.Fatal(err)
	}
	return &halfSent{conn: conn, rest: body[half:]}
}

// finish sends the rest of the body and reads the answer.
func (h *halfSent) finish(t *testing.T) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(h.conn, h.rest); err != nil {
		t.Fatalf("sending the rest of the body: %v", err)
	}
	h.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(h.conn), nil)
	if err != nil {
		t.Fatalf("reading the answer of the call in flight: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// refused reports whether a new connection to addr is refused.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// TestShutdownDrains sends SIGTERM to `sluice serve` while a decision is
// in flight (its body half sent): the listener closes at once, the call
// in flight is answered, and sluice exits 0 within --shutdown-timeout.
// Kubernetes and systemd send SIGTERM and wait the grace period; a call
// cut off there would be an error the caller's proxy turns into "allow".
func TestShutdownDrains(t *testing.T) {
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte("rules:\n  - {id: per-user, by: user, limit: 5, window: 1m}\n"), 0o644)
	data := "127.0.0.1:" + strconv.Itoa(listentest.FreePort(t))
	p := startProc(t, nil, "serve", "--listen", data, "--admin-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
		"--rules", rulesPath, "--shutdown-timeout", "20s")
	p.waitHealthy(t, "http://"+data+"/healthz")

	call := sendHalf(t, data, "POST /ratelimit/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n",
		`{"user": "alice", "endpoint": "GET /api/orders"}`)
	time.Sleep(200 * time.Millisecond) // the server has read the headers: the call is active
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for !refused(data) {
		if time.Now().After(deadline) {
			t.Fatalf("the data port still accepts connections 10s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-p.exited:
		t.Fatalf("sluice exited with a call in flight: %v\n%s", p.err, p.log)
	case <-time.After(300 * time.Millisecond):
	}
	resp, body := call.finish(t)
	if resp.StatusCode != 200 || !strings.Contains(body, `"allowed":true`) || !strings.Contains(body, `"rule":"per-user"`) {
		t.Errorf("the call in flight at SIGTERM: %d %s, want 200 allowed under per-user", resp.StatusCode, body)
	}
	if err := p.waitExit(t, 15*time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v, want 0\n%s", err, p.log)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("SIGTERM to exit took %s", took)
	}
	if !strings.Contains(p.log.String(), "shutting down") {
		t.Errorf("no 'shutting down' in the log:\n%s", p.log)
	}
}

// TestGatewayShutdownDrains is TestShutdownDrains for `sluice gateway`:
// a proxied call whose upstream is still answering at SIGTERM gets its
// answer.
func TestGatewayShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
		io.WriteString(w, "slow answer\n")
	})
	defer close(release)
	rulesPath := writeRules(t, "rules:\n  - {id: per-ip, by: ip, limit: 5, window: 1m}\n")
	gw := "127.0.0.1:" + strconv.Itoa(listentest.FreePort(t))
	adm := "127.0.0.1:" + strconv.Itoa(listentest.FreePort(t))
	p := startProc(t, nil, "gateway", "--listen", gw, "--admin-listen", adm, "--upstream", up.URL,
		"--rules", rulesPath, "--shutdown-timeout", "20s")
	p.waitHealthy(t, "http://"+adm+"/healthz")

	call := sendHalf(t, gw, "POST /upload HTTP/1.1\r\nHost: app\r\n", "0123456789")
	time.Sleep(100 * time.Millisecond)
	io.WriteString(call.conn, call.rest)
	call.rest = ""
	deadline := time.Now().Add(10 * time.Second)
	for up.calls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the call never reached the upstream:\n%s", p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	for !refused(gw) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway port still accepts connections 10s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-p.exited:
		t.Fatalf("the gateway exited with a call in flight: %v\n%s", p.err, p.log)
	case <-time.After(300 * time.Millisecond):
	}
	release <- struct{}{}
	resp, body := call.finish(t)
	if resp.StatusCode != 200 || body != "slow answer\n" {
		t.Errorf("the call in flight at SIGTERM: %d %q, want 200 \"slow answer\\n\"", resp.StatusCode, body)
	}
	if err := p.waitExit(t, 15*time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v, want 0\n%s", err, p.log)
	}
}

// TestSystemdNotifyAndReload runs serve as systemd's Type=notify does:
// READY=1 arrives on $NOTIFY_SOCKET once it serves, SIGHUP (ExecReload)
// reads the rules file at once (the poll is an hour here) without ending
// the process, and SIGTERM sends STOPPING=1 and exits 0.
func TestSystemdNotifyAndReload(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	states := make(chan string, 8)
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := ln.Read(buf)
			if err != nil {
				close(states)
				return
			}
			states <- string(buf[:n])
		}
	}()
	next := func(want string) {
		t.Helper()
		select {
		case got, ok := <-states:
			if !ok || got != want {
				t.Fatalf("NOTIFY_SOCKET read %q, want %q", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s on NOTIFY_SOCKET after 20s", want)
		}
	}

	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte("rules: []\n"), 0o644)
	data := "127.0.0.1:" + strconv.Itoa(listentest.FreePort(t))
	p := startProc(t, []string{"NOTIFY_SOCKET=" + sock}, "serve", "--listen", data, "--admin-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--rules", rulesPath, "--rules-poll", "1h")
	next("READY=1")
	p.waitHealthy(t, "http://"+data+"/healthz")

	os.WriteFile(rulesPath, []byte("rules:\n  - {id: one-a-minute, by: user, limit: 1, window: 1m}\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	check := func() string {
		resp, err := http.Post("http://"+data+"/ratelimit/check", "application/json", strings.NewReader(`{"user": "alice"}`))
		if err != nil {
			t.Fatalf("check after SIGHUP: %v\n%s", err, p.log)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(check(), `"rule":"one-a-minute"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the rule written before SIGHUP is not in force 10s later (poll: 1h):\n%s", p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The line is logged once the check that put the rule in force returns.
	for !strings.Contains(p.log.String(), "SIGHUP: rules file checked") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line of the reload:\n%s", p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	next("STOPPING=1")
	if err := p.waitExit(t, 15*time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v, want 0\n%s", err, p.log)
	}
}
