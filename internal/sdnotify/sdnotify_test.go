package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// listen opens a unixgram socket as systemd does and returns it; NOTIFY_SOCKET names it.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func read(t *testing.T, ln *net.UnixConn) string {
	t.Helper()
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	n, err := ln.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	ln := listen(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	for _, state := range []string{Ready, Stopping} {
		if sent, err := Notify(state); !sent || err != nil {
			t.Fatalf("Notify(%q) = %v, %v, want true, nil", state, sent, err)
		}
		if got := read(t, ln); got != state {
			t.Errorf("the socket read %q, want %q", got, state)
		}
	}
}

func TestNotifyAbstract(t *testing.T) {
	name := "sluice-sdnotify-test-" + time.Now().Format("150405.000000000")
	ln := listen(t, "@"+name)
	t.Setenv("NOTIFY_SOCKET", "@"+name)
	if sent, err := Notify(Ready); !sent || err != nil {
		t.Fatalf("Notify(Ready) on an abstract socket = %v, %v, want true, nil", sent, err)
	}
	if got := read(t, ln); got != Ready {
		t.Errorf("the socket read %q, want %q", got, Ready)
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("Notify without NOTIFY_SOCKET = %v, %v, want false, nil", sent, err)
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "absent"))
	if sent, err := Notify(Ready); sent || err == nil {
		t.Errorf("Notify to a socket nobody listens on = %v, %v, want false and an error", sent, err)
	}
}
