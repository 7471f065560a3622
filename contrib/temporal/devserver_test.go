package retracetemporal_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

// devServerVersion is the Temporal CLI scripts/temporal.sh builds.
const devServerVersion = "v1.5.1"

// devServerBin finds the Temporal CLI: RETRACE_TEMPORAL_BIN, or the one
// scripts/temporal.sh keeps in the cache. Without it a test skips, saying
// how to build it; under CI=true it fails, since CI builds it.
func devServerBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RETRACE_TEMPORAL_BIN"); p != "" {
		return p
	}
	cache := os.Getenv("RETRACE_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(dir, "retrace")
	}
	p := filepath.Join(cache, "temporal-"+devServerVersion)
	if _, err := os.Stat(p); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("the Temporal dev server is not built (%s); CI builds it with scripts/temporal.sh build", p)
		}
		t.Skipf("the Temporal dev server is not built: scripts/temporal.sh build (minutes the first time), or set RETRACE_TEMPORAL_BIN")
	}
	return p
}

// freePort is a port on 127.0.0.1 no one listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startDevServer starts a Temporal dev server on 127.0.0.1, in memory,
// without its UI, and returns a client of its default namespace and its
// address; both end with the test.
func startDevServer(t *testing.T) (client.Client, string) {
	t.Helper()
	bin := devServerBin(t)
	port := freePort(t)
	cmd := exec.Command(bin, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--log-level", "error",
		"--port", strconv.Itoa(port), "--http-port", strconv.Itoa(freePort(t)), "--metrics-port", strconv.Itoa(freePort(t)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it ends with the test's process
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	// The server prints its address once its frontend listens.
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "Server:") {
				ready <- nil
				for sc.Scan() {
				}
				return
			}
		}
		ready <- fmt.Errorf("the dev server exited before it listened: %s", stderr.String())
	}()
	guard := time.NewTimer(2 * time.Minute) // a guard: the line comes, or the process is stuck
	defer guard.Stop()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-guard.C:
		t.Fatal("the dev server did not say it listens within 2 minutes")
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: "default", Logger: quiet{}})
	if err != nil {
		t.Fatalf("dialing the dev server: %v (its stderr: %s)", err, stderr.String())
	}
	t.Cleanup(c.Close)
	return c, addr
}

// quiet is a Temporal logger that keeps the test's output to the test.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
