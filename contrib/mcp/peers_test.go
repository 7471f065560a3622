package retracemcp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP peers written elsewhere (the reference server and the
// conformance suite, on Node 22 as an npm package), as scripts/mcp-peers.sh
// installs them.
type peerDir string

// peers finds the MCP peers: at $RETRACE_MCP_PEERS, else where
// scripts/mcp-peers.sh installs them. Without them a test skips, but under
// CI=true it fails: CI installs them, and a test of a real peer that did not
// run proved nothing.
func peers(t *testing.T) peerDir {
	t.Helper()
	dir := os.Getenv("RETRACE_MCP_PEERS")
	if dir == "" {
		out, err := exec.Command("../../scripts/mcp-peers.sh", "path").Output()
		if err != nil {
			t.Fatalf("scripts/mcp-peers.sh path: %v", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	p := peerDir(dir)
	for _, f := range []string{p.node(), p.everything(), p.conformance()} {
		if _, err := os.Stat(f); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the MCP peers are not installed (%v): CI must run scripts/mcp-peers.sh install first", err)
			}
			t.Skipf("the MCP peers are not installed (%v): run scripts/mcp-peers.sh install", err)
		}
	}
	return p
}

func (p peerDir) node() string { return filepath.Join(string(p), "node_modules", ".bin", "node") }

func (p peerDir) everything() string {
	return filepath.Join(string(p), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

func (p peerDir) conformance() string {
	return filepath.Join(string(p), "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
}

// received counts the JSON-RPC messages a server received, by method, as
// they crossed into it: over stdio what was written to its pipe, over HTTP
// what a proxy in front of it delivered.
type received struct {
	mu      sync.Mutex
	methods map[string]int
	tools   map[string]int // tools/call, by tool
	changed chan struct{}  // closed, and replaced, at each message
}

func newReceived() *received {
	return &received{methods: map[string]int{}, tools: map[string]int{}, changed: make(chan struct{})}
}

// add counts the JSON-RPC message (or batch) in raw.
func (r *received) add(raw []byte) {
	var msgs []struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		_ = json.Unmarshal(raw, &msgs)
	} else {
		msgs = msgs[:0]
		var one struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(raw, &one) == nil {
			msgs = append(msgs, one)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if m.Method == "" {
			continue // a response to the server's own request
		}
		r.methods[m.Method]++
		if m.Method == "tools/call" {
			r.tools[m.Params.Name]++
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *received) calls(tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tools[tool]
}

func (r *received) method(m string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.methods[m]
}

// wait waits until the server has received n calls of tool.
func (r *received) wait(tool string, n int) error {
	guard := time.NewTimer(60 * time.Second) // a guard: the request is on its way or never comes
	defer guard.Stop()
	for {
		r.mu.Lock()
		got, ch := r.tools[tool], r.changed
		r.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-guard.C:
			return fmt.Errorf("the server never received call %d of %s", n, tool)
		}
	}
}

// countingPipe is the writing end of a server's stdin: each line written
// whole is a message the server received.
type countingPipe struct {
	w    io.WriteCloser
	r    *received
	mu   sync.Mutex
	line []byte
}

func (p *countingPipe) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	eachLine(&p.line, b[:n], p.r.add)
	return n, err
}

func (p *countingPipe) Close() error { return p.w.Close() }

// everything is one process of the reference server.
type everything struct {
	cmd    *exec.Cmd
	stderr *lineLog
	// over HTTP: the proxy in front of it, which counts, and its URL
	proxy *http.Server
	url   string
	// over stdio: the transport on its pipes
	transport mcp.Transport
	once      sync.Once
}

// startEverything starts the reference server over tr, counting what it
// receives into r, and stops it when the test ends.
func startEverything(t *testing.T, p peerDir, tr transport, r *received) *everything {
	t.Helper()
	e := &everything{stderr: newLineLog()}
	switch tr {
	case overStdio:
		e.cmd = exec.Command(p.node(), p.everything(), "stdio")
		stdin, err := e.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := e.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		e.cmd.Stderr = e.stderr
		if err := e.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		e.transport = &mcp.IOTransport{Reader: stdout, Writer: &countingPipe{w: stdin, r: r}}
	case overHTTP:
		abs, err := filepath.Abs("testdata/loopback.mjs")
		if err != nil {
			t.Fatal(err)
		}
		e.cmd = exec.Command(p.node(), "--import", "file://"+abs, p.everything(), "streamableHttp")
		e.cmd.Env = append(os.Environ(), "PORT=0")
		e.cmd.Stderr = e.stderr
		if err := e.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line := e.stderr.await(t, "the port it listens on", "retrace-loopback-port ")
		port, err := strconv.Atoi(strings.TrimPrefix(line, "retrace-loopback-port "))
		if err != nil {
			t.Fatalf("the server's port: %q", line)
		}
		e.startProxy(t, port, r)
	}
	t.Cleanup(e.kill)
	return e
}

// startProxy puts a reverse proxy on 127.0.0.1 in front of the server,
// which counts what it delivers: a request the server answered, at least
// with its headers, is one it received.
func (e *everything) startProxy(t *testing.T, port int, r *received) {
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	upstream := &http.Transport{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := upstream.RoundTrip(req)
		if err == nil && req.Method == http.MethodPost {
			r.add(body)
		}
		return resp, err
	})
	rp.FlushInterval = -1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.proxy = &http.Server{Handler: rp}
	e.url = "http://" + ln.Addr().String() + "/mcp"
	go func() { _ = e.proxy.Serve(ln) }()
	t.Cleanup(upstream.CloseIdleConnections)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// kill makes the server gone, as its death looks to a client: over HTTP
// the address it was reached at refuses connections and the streams it
// held open are cut; then its process is killed, and awaited.
func (e *everything) kill() {
	e.once.Do(func() {
		if e.proxy != nil {
			_ = e.proxy.Close()
		}
		if e.cmd.Process != nil {
			_ = e.cmd.Process.Signal(syscall.SIGKILL)
			_ = e.cmd.Wait()
		}
	})
}

// connectTransport is the transport a client connects to the server with.
func (e *everything) connectTransport() mcp.Transport {
	if e.transport != nil {
		return e.transport
	}
	return &mcp.StreamableClientTransport{Endpoint: e.url}
}

// lineLog keeps what a process writes on stderr, a line at a time.
type lineLog struct {
	mu      sync.Mutex
	buf     []byte
	lines   []string
	changed chan struct{}
}

func newLineLog() *lineLog { return &lineLog{changed: make(chan struct{})} }

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	eachLine(&l.buf, p, func(b []byte) { l.lines = append(l.lines, string(b)) })
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// await waits for a line that starts with prefix, and returns it.
func (l *lineLog) await(t *testing.T, what, prefix string) string {
	t.Helper()
	guard := time.NewTimer(60 * time.Second) // a guard: a server says it at once or never
	defer guard.Stop()
	for {
		l.mu.Lock()
		lines, ch := append([]string(nil), l.lines...), l.changed
		l.mu.Unlock()
		for _, s := range lines {
			if strings.HasPrefix(s, prefix) {
				return s
			}
		}
		select {
		case <-ch:
		case <-guard.C:
			t.Fatalf("the server never said %s; it said %q", what, lines)
		}
	}
}

// checkCount is the checks of one status the conformance suite recorded.
type checkRun struct {
	passed, failed map[string]int // by scenario and check id
}

func (c checkRun) total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// scenarioOf is the scenario a result directory holds, its run's time cut.
func scenarioOf(rel string) string {
	if loc := runTime.FindStringIndex(rel); loc != nil && loc[0] > 0 {
		return rel[:loc[0]]
	}
	return rel
}

// runTime is the timestamp the conformance suite appends to a scenario's
// directory.
var runTime = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T\d{2}[-:].*$`)

// readChecks reads the checks.json files of a conformance run's output.
func readChecks(t *testing.T, dir string) checkRun {
	t.Helper()
	run := checkRun{passed: map[string]int{}, failed: map[string]int{}}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return err
		}
		rel, _ := filepath.Rel(dir, filepath.Dir(path))
		// The suite names each scenario's directory after the run's time
		// (name-2026-12-04T04-58-20-123Z): the name is what comes before
		// it. Cut at the date's shape, not at the first "-20" from the
		// end, which a run at 20 seconds past the minute also holds.
		scenario := scenarioOf(rel)
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var checks []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal(raw, &checks); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, c := range checks {
			switch c.Status {
			case "SUCCESS":
				run.passed[scenario+" "+c.ID]++
			case "FAILURE":
				run.failed[scenario+" "+c.ID]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// A result directory's scenario is its name without the run's time,
// whatever second the run began at: at 20 seconds past the minute the
// time holds "-20" after the date too.
func TestScenarioOf(t *testing.T) {
	for rel, want := range map[string]string{
		"tools_call-2026-12-04T04-58-20-123Z":                         "tools_call",
		"auth/basic-cimd-2026-12-04T04-58-20-777Z":                    "auth/basic-cimd",
		"auth/2025-03-26-oauth-endpoint-fallback-2026-12-04T04-58-07": "auth/2025-03-26-oauth-endpoint-fallback",
		"initialize-2026-12-04T04:58:20.123Z":                         "initialize",
		"no-time-here":                                                "no-time-here",
	} {
		if got := scenarioOf(rel); got != want {
			t.Errorf("scenarioOf(%q) = %q, want %q", rel, got, want)
		}
	}
}
