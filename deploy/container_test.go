package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostCABundles are where Debian, Fedora and Alpine keep the system's CA
// certificates as one PEM file.
var hostCABundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// lastStage returns the last stage of a Containerfile (from its last
// FROM), one instruction a line, continuation lines joined.
func lastStage(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var instrs []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		instrs = append(instrs, cur.String())
		cur.Reset()
	}
	last := -1
	for i, in := range instrs {
		if strings.HasPrefix(strings.ToUpper(in), "FROM ") {
			last = i
		}
	}
	if last < 0 {
		t.Fatalf("%s: no FROM", path)
	}
	return instrs[last:]
}

var copyFromBuild = regexp.MustCompile(`^COPY --from=build((?: --[a-z]+=\S+)*) (\S+) (\S+)$`)

// finalStageContext writes into dir the Containerfile's last stage as a
// Containerfile of its own, each file it copies from the build stage
// replaced by the host's: the binary built by TestMain, the host's CA
// bundle, an empty directory for /var/lib/sluice, and /out/passwd as the
// build stage writes it. An instruction it does not know fails the test,
// so that the stage built here stays the one users get.
func finalStageContext(t *testing.T, dir string) {
	t.Helper()
	stage := lastStage(t, "container/Containerfile")
	if stage[0] != "FROM scratch" {
		t.Fatalf("the last stage starts %q, want FROM scratch (no base image can be pulled here)", stage[0])
	}
	full, _ := os.ReadFile("container/Containerfile")
	passwd := regexp.MustCompile(`printf '([^']*)\\n' > /out/passwd`).FindSubmatch(full)
	if passwd == nil {
		t.Fatal("the build stage does not write /out/passwd with printf '...\\n' (the test copies that line)")
	}
	put := func(name string, data []byte, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			t.Fatal(err)
		}
	}
	var out []string
	for _, in := range stage {
		m := copyFromBuild.FindStringSubmatch(in)
		if m == nil {
			if strings.HasPrefix(in, "COPY ") || strings.HasPrefix(in, "ADD ") || strings.HasPrefix(in, "RUN ") {
				t.Fatalf("the last stage has %q: the test only knows COPY --from=build", in)
			}
			out = append(out, in)
			continue
		}
		opts, src, dst := m[1], m[2], m[3]
		var local string
		switch src {
		case "/out/sluice":
			local = "sluice"
			data, err := os.ReadFile(binary)
			if err != nil {
				t.Fatal(err)
			}
			put(local, data, 0o755)
		case "/out/passwd":
			local = "passwd"
			put(local, append(passwd[1], '\n'), 0o644)
		case "/out/bin":
			local = "bin"
			if err := os.Mkdir(filepath.Join(dir, local), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/usr/local/bin/sluice", filepath.Join(dir, local, "ratelimit")); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(full), "ln -s /usr/local/bin/sluice /out/bin/ratelimit") {
				t.Fatal("the build stage does not make /out/bin/ratelimit a link to /usr/local/bin/sluice, as the test does")
			}
		case "/out/var/lib/sluice":
			local = "state"
			if err := os.Mkdir(filepath.Join(dir, local), 0o755); err != nil {
				t.Fatal(err)
			}
		case "/etc/ssl/certs/ca-certificates.crt":
			local = "ca-certificates.crt"
			for _, p := range hostCABundles {
				if data, err := os.ReadFile(p); err == nil {
					put(local, data, 0o644)
					break
				}
			}
			if _, err := os.Stat(filepath.Join(dir, local)); err != nil {
				t.Skipf("no CA bundle on this host (looked at %v): cannot build the image's last stage", hostCABundles)
			}
		default:
			t.Fatalf("the last stage copies %s from the build stage: the test does not know what the host has in its place", src)
		}
		out = append(out, "COPY"+opts+" "+local+" "+dst)
	}
	put("Containerfile", []byte(strings.Join(out, "\n")+"\n"), 0o644)
}

// podman runs podman with args and returns its trimmed output.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("podman", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// runFlags are podman run's flags for this machine: runc (rootful podman
// here has no other runtime), the host's network (no container network
// is installed) and resource limits no higher than the sandbox lets a
// container set.
var runFlags = []string{"--runtime", "runc", "--network", "host", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}

// TestContainerImage builds the image's last stage (deploy/container/
// Containerfile) from the binary built here — no base image can be
// pulled, so the build stage is the host's Go — and runs it as a user
// would: read-only root file system, non-root, /healthz, a rule written
// through the admin API (into the volume) and decisions under it, and
// SIGTERM (podman stop) with a decision in flight: answered, exit 0,
// within the grace period.
func TestContainerImage(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("no container engine: podman is not installed (./scripts/test.sh installs podman and runc from Debian's packages; it could not here)")
	}
	ctxDir := t.TempDir()
	finalStageContext(t, ctxDir)
	image := fmt.Sprintf("localhost/sluice-deploytest:%d", time.Now().UnixNano())
	podman(t, "build", "--runtime", "runc", "--build-arg", "VERSION="+testVersion, "--build-arg", "REVISION="+testRevision,
		"-f", filepath.Join(ctxDir, "Containerfile"), "-t", image, ctxDir)
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", image).Run() })

	size, _ := strconv.ParseInt(podman(t, "image", "inspect", "--format", "{{.Size}}", image), 10, 64)
	fi, _ := os.Stat(binary)
	t.Logf("image %s: %.1f MB (binary %.1f MB, built -trimpath -ldflags \"-s -w\")", image, float64(size)/1e6, float64(fi.Size())/1e6)

	var labels map[string]string
	if err := json.Unmarshal([]byte(podman(t, "image", "inspect", "--format", "{{json .Labels}}", image)), &labels); err != nil {
		t.Fatal(err)
	}
	if labels["org.opencontainers.image.version"] != testVersion || labels["org.opencontainers.image.revision"] != testRevision {
		t.Errorf("image labels %v, want org.opencontainers.image.version %s and .revision %s", labels, testVersion, testRevision)
	}
	if v := podman(t, append(append([]string{"run", "--rm"}, runFlags...), image, "--version")...); !strings.HasPrefix(v, "sluice "+testVersion+"\ncommit "+testRevision+"\n") {
		t.Errorf("sluice --version in the image:\n%s\nwant sluice %s, commit %s", v, testVersion, testRevision)
	}

	// /bin/ratelimit, envoyproxy/ratelimit's command, is sluice serve.
	rlData := freeAddr(t)
	rlName := fmt.Sprintf("sluice-deploytest-rl-%d", time.Now().UnixNano())
	podman(t, append(append([]string{"run", "-d", "--name", rlName, "--entrypoint", "/bin/ratelimit"}, runFlags...), image,
		"--listen", rlData, "--admin-listen", freeAddr(t), "--grpc-listen", freeAddr(t))...)
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", "-v", rlName).Run() })
	waitOK(t, "http://"+rlData+"/healthz", nil, stringer(func() string { out, _ := exec.Command("podman", "logs", rlName).CombinedOutput(); return string(out) }))
	exec.Command("podman", "rm", "-f", "-v", rlName).Run()

	data, adminAddr, grpc := freeAddr(t), freeAddr(t), freeAddr(t)
	name := fmt.Sprintf("sluice-deploytest-%d", time.Now().UnixNano())
	podman(t, append(append([]string{"run", "-d", "--name", name, "--read-only"}, runFlags...), image,
		"serve", "--listen", data, "--admin-listen", adminAddr, "--grpc-listen", grpc, "--shutdown-timeout", "20s")...)
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", "-v", name).Run() })
	logs := stringer(func() string { out, _ := exec.Command("podman", "logs", name).CombinedOutput(); return string(out) })
	waitOK(t, "http://"+data+"/healthz", nil, logs)

	pid := podman(t, "inspect", "--format", "{{.State.Pid}}", name)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if uid := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(status); uid == nil || string(uid[1]) != "65532" {
		t.Errorf("sluice in the container runs as uid %s, want 65532 (non-root)", uid)
	}

	// The rules file is written in the volume while the root is read-only.
	req, _ := http.NewRequest("PUT", "http://"+adminAddr+"/rules/two-a-minute",
		strings.NewReader(`{"id": "two-a-minute", "by": "user", "limit": 2, "window": "1m"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("PUT /rules/two-a-minute: %d %s\n%s", resp.StatusCode, body, logs)
	}
	for i, want := range []string{`"allowed":true`, `"allowed":true`, `"allowed":false`} {
		resp, err := http.Post("http://"+data+"/ratelimit/check", "application/json", strings.NewReader(`{"user": "alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("check %d: %d %s, want %s", i+1, resp.StatusCode, b, want)
		}
	}

	// SIGTERM with a decision in flight.
	conn, err := net.Dial("tcp", data)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := `{"user": "bob"}`
	fmt.Fprintf(conn, "POST /ratelimit/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(call), call[:5])
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	stopped := make(chan string, 1)
	go func() {
		out, err := exec.Command("podman", "stop", "-t", "30", name).CombinedOutput()
		stopped <- fmt.Sprintf("%v %s", err, out)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", data, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the data port still accepts connections 15s after podman stop\n%s", logs)
		}
		time.Sleep(25 * time.Millisecond)
	}
	io.WriteString(conn, call[5:])
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the call in flight at SIGTERM: %v\n%s", err, logs)
	}
	b, _ := io.ReadAll(answer.Body)
	if answer.StatusCode != 200 || !strings.Contains(string(b), `"allowed":true`) {
		t.Errorf("the call in flight at SIGTERM: %d %s, want 200 allowed", answer.StatusCode, b)
	}
	select {
	case out := <-stopped:
		if !strings.HasPrefix(out, "<nil>") {
			t.Errorf("podman stop: %s", out)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("podman stop -t 30 still running after 40s\n%s", logs)
	}
	took := time.Since(start)
	code := podman(t, "inspect", "--format", "{{.State.ExitCode}}", name)
	if code != "0" || took > 25*time.Second {
		t.Errorf("after SIGTERM: exit code %s after %s, want 0 well within the 30 s grace (SIGKILL would be 137)\n%s", code, took, logs)
	}
	t.Logf("SIGTERM with a call in flight: answered, exit %s after %s", code, took.Round(time.Millisecond))
}

// stringer is a func as a fmt.Stringer.
type stringer func() string

func (f stringer) String() string { return f() }
