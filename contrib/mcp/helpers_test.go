package retracemcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// serverLog is what a fault server process told on its stderr: one event a
// line, and what else it wrote.
type serverLog struct {
	mu      sync.Mutex
	buf     []byte
	events  []event
	other   []string
	changed chan struct{} // closed, and replaced, at each event
}

func newServerLog() *serverLog { return &serverLog{changed: make(chan struct{})} }

func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	eachLine(&l.buf, p, func(b []byte) {
		line := string(b)
		var ev event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Kind != "" {
			l.events = append(l.events, ev)
			close(l.changed)
			l.changed = make(chan struct{})
		} else {
			l.other = append(l.other, line)
		}
	})
	return len(p), nil
}

// eachLine appends p to buf and hands each whole line buf then holds to
// line, without its newline, keeping the rest.
func eachLine(buf *[]byte, p []byte, line func([]byte)) {
	*buf = append(*buf, p...)
	for {
		i := bytes.IndexByte(*buf, '\n')
		if i < 0 {
			return
		}
		line((*buf)[:i])
		*buf = (*buf)[i+1:]
	}
}

// await waits for the server to have told what ok looks for, and returns
// the events so far.
func (l *serverLog) await(t *testing.T, what string, ok func([]event) bool) []event {
	t.Helper()
	evs, err := l.wait(what, ok)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// wait is await for a goroutine other than the test's: it returns the
// error instead of failing the test.
func (l *serverLog) wait(what string, ok func([]event) bool) ([]event, error) {
	deadline := time.NewTimer(60 * time.Second) // a guard: the server tells at once or never
	defer deadline.Stop()
	for {
		l.mu.Lock()
		evs, ch := append([]event(nil), l.events...), l.changed
		l.mu.Unlock()
		if ok(evs) {
			return evs, nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			return evs, fmt.Errorf("the server never told %s; it said %v and %q", what, evs, l.otherLines())
		}
	}
}

func (l *serverLog) otherLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.other...)
}

// requests are the requests of method (and tool, if not "") the server
// received.
func (l *serverLog) requests(method, tool string) []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return requestsIn(l.events, method, tool)
}

func requestsIn(evs []event, method, tool string) []event {
	var out []event
	for _, ev := range evs {
		if ev.Kind == "request" && ev.Method == method && (tool == "" || ev.Tool == tool) {
			out = append(out, ev)
		}
	}
	return out
}

// finish closes the session and stops the server's process: once it has
// exited, everything it wrote on stderr is in the log.
func (c *child) finish(cs *mcp.ClientSession) {
	_ = cs.Close() // over stdio, waits for the process
	c.stop()
}

func count(kind string) func([]event) bool {
	return func(evs []event) bool {
		for _, ev := range evs {
			if ev.Kind == kind {
				return true
			}
		}
		return false
	}
}

// transport names the two ways the tests reach the fault server.
type transport string

const (
	overStdio transport = "stdio"
	overHTTP  transport = "http"
)

// child is a running fault server.
type child struct {
	log   *serverLog
	spans string // its spans, one line of OTLP JSON each
	cmd   *exec.Cmd
	url   string // over HTTP
}

// serverOpts are a fault server's flags and environment.
type serverOpts struct {
	args []string
	env  []string
	log  *serverLog // nil: a fresh one
}

// serverCommand is the fault server's command, its stderr to the log.
func serverCommand(t *testing.T, so serverOpts) (*exec.Cmd, *child) {
	c := &child{log: so.log, spans: filepath.Join(t.TempDir(), "spans.jsonl")}
	if c.log == nil {
		c.log = newServerLog()
	}
	cmd := exec.Command(serverBin, append([]string{"-spans", c.spans}, so.args...)...)
	cmd.Stderr = c.log
	cmd.Env = append(append(os.Environ(), faultsEnv+"=1"), so.env...)
	c.cmd = cmd
	return cmd, c
}

// startHTTP starts the fault server on 127.0.0.1 and stops it, by its PID,
// when the test ends.
func startHTTP(t *testing.T, so serverOpts) *child {
	so.args = append([]string{"-http", "127.0.0.1:0"}, so.args...)
	cmd, c := serverCommand(t, so)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop() })
	evs := c.log.await(t, "where it listens", count("listening"))
	for _, ev := range evs {
		if ev.Kind == "listening" {
			c.url = ev.URL
		}
	}
	return c
}

// stop stops an HTTP server's process and waits for it.
func (c *child) stop() {
	if c.cmd.Process == nil || c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
}

// serverSpans reads the spans the server wrote.
func (c *child) serverSpans(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(c.spans)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}

// connect connects client to a fresh fault server over tr, the transport
// wrapped by wrap (nil: as it is), and closes the session (and, over
// HTTP, the server) when the test ends.
func connect(t *testing.T, ctx context.Context, client *mcp.Client, tr transport, wrap func(mcp.Transport) mcp.Transport, so serverOpts) (*mcp.ClientSession, *child) {
	t.Helper()
	if wrap == nil {
		wrap = func(t mcp.Transport) mcp.Transport { return t }
	}
	var mt mcp.Transport
	var c *child
	var ht *http.Transport
	switch tr {
	case overStdio:
		var cmd *exec.Cmd
		cmd, c = serverCommand(t, so)
		mt = &mcp.CommandTransport{Command: cmd}
	case overHTTP:
		c = startHTTP(t, so)
		ht = &http.Transport{}
		// Without the standalone stream: a test's session makes only
		// its own requests, and closes at once.
		mt = &mcp.StreamableClientTransport{Endpoint: c.url, HTTPClient: &http.Client{Transport: ht}, DisableStandaloneSSE: true}
	}
	cs, err := client.Connect(ctx, wrap(mt), nil)
	if err != nil {
		t.Fatalf("connecting over %s: %v (server: %q)", tr, err, c.log.otherLines())
	}
	t.Cleanup(func() {
		_ = cs.Close()
		if ht != nil {
			ht.CloseIdleConnections()
		}
	})
	return cs, c
}

func lines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// rootInt is an integer attribute of the trace's root span, 0 when absent.
func rootInt(spans []sdktrace.ReadOnlySpan, key string) int64 {
	for _, s := range spans {
		if s.Parent().IsValid() {
			continue
		}
		for _, kv := range s.Attributes() {
			if string(kv.Key) == key {
				return kv.Value.AsInt64()
			}
		}
	}
	return 0
}
