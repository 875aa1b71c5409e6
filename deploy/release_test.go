package deploy

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestRelease runs scripts/release.sh (docs/releasing.md) for the host's
// linux/amd64 — arm64 is the same build with another GOARCH, too slow to
// cross-compile on every run — and checks the archive: the binary (a
// static executable that says the version), LICENSE, README.md and
// CHANGELOG.md, and SHA256SUMS.
func TestRelease(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("../scripts/release.sh", "v0.0.0-releasetest", out)
	cmd.Env = append(os.Environ(), "RELEASE_ALLOW_DIRTY=1", "RELEASE_PLATFORMS=linux/amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	name := "sluice_v0.0.0-releasetest_linux_amd64"
	archive := filepath.Join(out, name+".tar.gz")
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var files []string
	dir := t.TempDir()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
		if h.Name == name+"/sluice" {
			w, _ := os.OpenFile(filepath.Join(dir, "sluice"), os.O_CREATE|os.O_WRONLY, 0o755)
			io.Copy(w, tr)
			w.Close()
		}
	}
	sort.Strings(files)
	want := []string{name + "/", name + "/CHANGELOG.md", name + "/LICENSE", name + "/README.md", name + "/sluice"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Errorf("the archive holds %v, want %v", files, want)
	}
	bin := filepath.Join(dir, "sluice")
	e, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the release binary is dynamically linked (has an interpreter): want CGO_ENABLED=0")
		}
	}
	if e.Section(".symtab") != nil {
		t.Errorf("the release binary has a symbol table: want -s -w")
	}
	e.Close()
	v, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "sluice v0.0.0-releasetest\ncommit ") || strings.Contains(string(v), "commit unknown") {
		t.Errorf("the release binary's version:\n%s(%v), want sluice v0.0.0-releasetest and a commit", v, err)
	}

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(archive)
	sum := sha256.Sum256(data)
	if want := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"; string(sums) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant\n%s", sums, want)
	}
}
