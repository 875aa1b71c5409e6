// Package redistest starts real redis-server processes for tests: a
// standalone server, or a Redis Cluster made with `redis-cli --cluster
// create`, on free loopback ports, in a temporary directory, stopped when the
// test ends. Tests can kill, pause (SIGSTOP) and restart them.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// Server is one redis-server process started by the test.
type Server struct {
	t    testing.TB
	Port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// Addr is the server's 127.0.0.1:port address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Lookup fails the test when the Redis binaries are missing: the README's
// test command installs them.
func lookup(t testing.TB, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found; run ./scripts/test.sh, which installs redis-server and redis-tools", name)
	}
	return p
}

// FreePort returns a loopback TCP port that was free a moment ago, below
// the kernel's ephemeral range (listentest.FreePort says why). For a
// cluster node the bus port (port+10000) must be free too.
func FreePort(t testing.TB) int {
	t.Helper()
	return listentest.FreePortIn(t, 12000, 22767, func(port int) bool { return listentest.Bindable(port + 10000) })
}

// Start starts a standalone redis-server with no persistence.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, Port: FreePort(t), dir: t.TempDir(), args: extra}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	args := append([]string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"), "--daemonize", "no",
	}, s.args...)
	s.cmd = exec.Command(lookup(s.t, "redis-server"), args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	go s.cmd.Wait() // reap
	if err := waitPing(s.Addr(), 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		s.t.Fatalf("redistest: redis-server on %s: %v\n%s", s.Addr(), err, log)
	}
}

// Kill ends the server with SIGKILL (like a crash). Safe to call twice.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Kill()
		waitClosed(s.Addr(), 5*time.Second)
	}
}

// Pause stops the process with SIGSTOP: it holds its connections and
// answers nothing, like a hung server.
func (s *Server) Pause() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// PID is the server process's ID, for a signal sent from outside the
// test's process.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Resume continues a paused server.
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// Restart kills the server and starts a new, empty one on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Do runs a redis-cli command against the server and returns its output.
func (s *Server) Do(args ...string) (string, error) {
	return cli(append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}, args...)...)
}

func cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// waitPing waits until addr answers PING with PONG.
func waitPing(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprint(c, "PING\r\n")
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err == nil && strings.HasPrefix(line, "+PONG") {
				return nil
			}
			last = fmt.Errorf("ping: %q %v", line, err)
		} else {
			last = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not answering after %s: %v", limit, last)
}

func waitClosed(addr string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// Cluster is a Redis Cluster of real processes.
type Cluster struct {
	Nodes []*Server // masters first, then replicas, as given to --cluster create
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr())
	}
	return a
}

// StartCluster starts masters×(1+replicas) nodes and joins them with
// `redis-cli --cluster create … --cluster-replicas R --cluster-yes`, then
// waits until every node reports cluster_state:ok. The nodes serve the
// slots they hold while another master is failed
// (cluster-require-full-coverage no, as docs/failure.md advises).
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	lookup(t, "redis-cli")
	c := &Cluster{}
	for range masters * (1 + replicas) {
		c.Nodes = append(c.Nodes, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000",
			"--cluster-replica-validity-factor", "0",
			"--cluster-require-full-coverage", "no",
		))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := cli(args...); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(t, 30*time.Second)
	return c
}

// WaitOK waits until every live node reports cluster_state:ok and all
// 16384 slots are assigned.
func (c *Cluster) WaitOK(t testing.TB, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok := true
		for _, n := range c.Nodes {
			info, err := n.Do("cluster", "info")
			if err != nil {
				continue // a killed node
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok after %s", limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// MasterOf returns the node serving key's slot.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	n, err := c.Master(key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return n
}

// Master returns the live node that serves key's slot by its own account.
func (c *Cluster) Master(key string) (*Server, error) {
	var slot string
	var err error
	for _, n := range c.Nodes {
		if slot, err = n.Do("cluster", "keyslot", key); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster keyslot: %v", err)
	}
	for _, n := range c.Nodes {
		role, err := n.Do("role")
		if err != nil || !strings.HasPrefix(role, "master") {
			continue
		}
		slots, err := n.Do("cluster", "countkeysinslot", slot)
		_ = slots
		if err != nil {
			continue
		}
		// A master owns the slot iff GETKEYSINSLOT does not redirect; ask
		// CLUSTER NODES for myself's slot ranges instead.
		nodes, err := n.Do("cluster", "nodes")
		if err != nil {
			continue
		}
		s, _ := strconv.Atoi(slot)
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "myself") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, found := strings.Cut(r, "-")
				if !found {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && s >= a && s <= b {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no master serves %q (slot %s)", key, slot)
}

// Agreed reports whether every live node names the same live master, other
// than not, as serving key's slot: the cluster has converged on a failover.
func (c *Cluster) Agreed(key string, not *Server) bool {
	var slot int
	found := false
	for _, n := range c.Nodes {
		if n == not {
			continue
		}
		if out, err := n.Do("cluster", "keyslot", key); err == nil {
			slot, _ = strconv.Atoi(out)
			found = true
			break
		}
	}
	if !found {
		return false
	}
	owner := ""
	for _, n := range c.Nodes {
		if n == not {
			continue
		}
		nodes, err := n.Do("cluster", "nodes")
		if err != nil {
			return false
		}
		this := ""
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && slot >= a && slot <= b {
					this = strings.Split(f[1], "@")[0]
				}
			}
		}
		if this == "" || this == not.Addr() || (owner != "" && this != owner) {
			return false
		}
		owner = this
	}
	return owner != ""
}

// ID returns the node's cluster id (CLUSTER MYID).
func (s *Server) ID(t testing.TB) string {
	t.Helper()
	out, err := s.Do("cluster", "myid")
	if err != nil {
		t.Fatalf("redistest: cluster myid on %s: %v: %s", s.Addr(), err, out)
	}
	return out
}

// Slot returns key's hash slot (CLUSTER KEYSLOT).
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	for _, n := range c.Nodes {
		if out, err := n.Do("cluster", "keyslot", key); err == nil {
			slot, err := strconv.Atoi(out)
			if err == nil {
				return slot
			}
		}
	}
	t.Fatalf("redistest: cluster keyslot %q: no node answered", key)
	return 0
}

// Masters returns the live nodes that are masters by their own account.
func (c *Cluster) Masters() []*Server {
	var out []*Server
	for _, n := range c.Nodes {
		if role, err := n.Do("role"); err == nil && strings.HasPrefix(role, "master") {
			out = append(out, n)
		}
	}
	return out
}

// BeginMigration starts moving slot from one master to another as
// `redis-cli --cluster reshard` does: IMPORTING on the target, then
// MIGRATING on the source. Until EndMigration, the source answers ASK for
// a key it does not have, and the target TRYAGAIN for a command of several
// keys it does not all have.
func (c *Cluster) BeginMigration(t testing.TB, slot int, from, to *Server) {
	t.Helper()
	s := strconv.Itoa(slot)
	mustDo(t, to, "cluster", "setslot", s, "importing", from.ID(t))
	mustDo(t, from, "cluster", "setslot", s, "migrating", to.ID(t))
}

// MoveKeys moves every key of slot from one master to the other with
// MIGRATE, in batches of 100, as `redis-cli --cluster reshard` does, and
// returns how many it moved.
func (c *Cluster) MoveKeys(t testing.TB, slot int, from, to *Server) int {
	t.Helper()
	moved := 0
	for {
		out := mustDo(t, from, "cluster", "getkeysinslot", strconv.Itoa(slot), "100")
		if out == "" {
			return moved
		}
		keys := strings.Split(out, "\n")
		args := append([]string{"migrate", "127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "replace", "keys"}, keys...)
		mustDo(t, from, args...)
		moved += len(keys)
	}
}

// EndMigration gives slot to the target, as `redis-cli --cluster reshard`
// ends a slot's move: SETSLOT NODE on the target, the source, then every
// other master.
func (c *Cluster) EndMigration(t testing.TB, slot int, from, to *Server) {
	t.Helper()
	s, id := strconv.Itoa(slot), to.ID(t)
	mustDo(t, to, "cluster", "setslot", s, "node", id)
	mustDo(t, from, "cluster", "setslot", s, "node", id)
	for _, m := range c.Masters() {
		if m != from && m != to {
			mustDo(t, m, "cluster", "setslot", s, "node", id)
		}
	}
}

// mustDo runs a redis-cli command on s and fails the test on an error or
// an error reply.
func mustDo(t testing.TB, s *Server, args ...string) string {
	t.Helper()
	out, err := s.Do(args...)
	if err != nil || strings.HasPrefix(out, "ERR") || strings.HasPrefix(out, "(error)") {
		t.Fatalf("redistest: redis-cli %s on %s: %v: %s", strings.Join(args, " "), s.Addr(), err, out)
	}
	return out
}
