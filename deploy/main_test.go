package deploy

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is sluice built as a release is (static, -trimpath, stripped,
// stamped with testVersion and testRevision).
var binary string

const (
	testVersion  = "v0.0.0-deploytest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

// buildFlags are the release build's (docs/releasing.md, the
// Containerfile's build stage), stamped with the test's version.
func buildFlags(version, revision string) []string {
	return []string{"-trimpath", "-ldflags", "-s -w" +
		" -X github.com/sluicehq/sluice/internal/cli.version=" + version +
		" -X github.com/sluicehq/sluice/internal/cli.commit=" + revision}
}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run()) // listing tests (scripts/test.sh looks for fuzz targets): no binary needed
	}
	dir, err := os.MkdirTemp("", "sluice-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", append(append([]string{"build", "-o", binary}, buildFlags(testVersion, testRevision)...), "../cmd/sluice")...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "deploy: building sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
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

// startSluice runs the binary with args until the test ends (SIGTERM,
// then SIGKILL after 10 s) and waits for healthURL to answer 200.
func startSluice(t *testing.T, healthURL string, args ...string) *syncLog {
	t.Helper()
	log := &syncLog{}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	waitOK(t, healthURL, exited, log)
	return log
}

// waitOK polls url until it answers 200 (20 s at most, or until exited
// is closed).
func waitOK(t *testing.T, url string, exited <-chan struct{}, log fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("sluice exited before %s answered:\n%s", url, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not 200 after 20s:\n%s", url, log)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
