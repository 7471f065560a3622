//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// demoResult is a line of the demo's -json output.
type demoResult struct {
	Scenario         string `json:"scenario"`
	ProviderRequests int    `json:"provider_requests"`
	LeafSpans        int    `json:"leaf_spans"`
	Calls            int    `json:"calls"`
	Outcome          string `json:"outcome"`
	Diagnosis        string `json:"diagnosis"`
	TraceID          string `json:"trace_id"`
}

func TestDemoTracesInJaeger(t *testing.T) {
	j, agent, root := jaegerAndDemo(t)

	for _, name := range []string{"always-503", "invalid-api-key", "sdk-retries"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(agent, "-json", "-scenario", name, "-time-scale", "0.001")
			// Written without a scheme, as people do: it must be insecure gRPC, not dropped.
			cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:"+j.otlpPort, "OTEL_SERVICE_NAME=retrace-e2e")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "the demo failed: %s", stderr.String())
			var res demoResult
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
			require.Len(t, res.TraceID, 32)

			tr := j.trace(t, res.TraceID)
			spans := tr.spans()
			rootSpan := tr.root()
			require.NotNil(t, rootSpan, "the trace has no root span")
			assert.Equal(t, "runtime", rootSpan.str("retrace.layer"))
			assert.Equal(t, "retrace-e2e", tr.service())

			// The trace proves its own counts.
			calls := rootSpan.num("retrace.calls")
			leaves := tr.leafSpans()
			assert.Equal(t, res.ProviderRequests, calls, "retrace.calls = provider requests")
			assert.Equal(t, res.ProviderRequests, len(leaves), "leaf layer spans = provider requests")

			// The conventions' shape: the logical model call is a CLIENT
			// inference span covering its retries; what is beneath it is
			// INTERNAL but for the physical requests, CLIENT spans named
			// after their method.
			chats := tr.layer("session")
			require.NotEmpty(t, chats)
			for _, c := range chats {
				assert.Equal(t, 3, c.Kind, "%s is a CLIENT span", c.Name)
				assert.True(t, strings.HasPrefix(c.Name, "chat "), c.Name)
				assert.Equal(t, "chat", c.str("gen_ai.operation.name"))
				assert.Equal(t, "openai", c.str("gen_ai.provider.name"))
				assert.NotEmpty(t, c.str("gen_ai.request.model"))
			}
			for _, m := range tr.layer("model") {
				assert.Equal(t, 1, m.Kind, "the model layer within an attempt is INTERNAL")
				assert.Empty(t, m.str("gen_ai.operation.name"), "only the inference span is an inference")
			}
			assert.Equal(t, res.Diagnosis, rootSpan.str("retrace.diagnosis"), "the diagnosis the demo printed")
			assert.Equal(t, res.Outcome, rootSpan.str("retrace.outcome"))

			// Attempts 1..N on every retrying layer.
			for _, s := range spans {
				n, max := s.num("retrace.attempts"), s.num("retrace.max_attempts")
				if s.value("retrace.max_attempts") == nil && s.value("retrace.calls") != nil {
					// The outermost layer's limit, left out where its worst case states it.
					max = s.num("retrace.calls.worst_case")
				}
				if n == 0 || max <= 1 {
					continue
				}
				var got []int
				for _, c := range tr.children(s) {
					if a := c.num("retrace.attempt"); a > 0 {
						got = append(got, a)
					}
				}
				sort.Ints(got)
				want := make([]int, n)
				for i := range want {
					want[i] = i + 1
				}
				assert.Equal(t, want, got, "attempts of %s %s", s.Name, s.SpanID)
			}
			// Every failed span says what failed.
			failed := 0
			for _, s := range spans {
				if s.Status.Code == 2 {
					failed++
					assert.NotEmpty(t, s.str("retrace.error.class"), "%s has no retrace.error.class", s.Name)
					assert.NotEmpty(t, s.str("error.type"), "%s has no error.type", s.Name)
				}
			}
			assert.Positive(t, failed)

			switch name {
			case "always-503":
				assert.Equal(t, 12, calls)
				assert.Equal(t, 12, rootSpan.num("retrace.calls.worst_case"))
				assert.Equal(t, "failed_exhausted", rootSpan.str("retrace.outcome"))
				assert.True(t, strings.HasPrefix(res.Diagnosis, "failed after 3 attempts"), res.Diagnosis)
				assert.Len(t, tr.layer("session"), 3)

				// retrace explain reads the same trace from Jaeger's API.
				e, text := explainInJaeger(t, root, j, res.TraceID)
				assert.Equal(t, res.TraceID, e.TraceID)
				assert.Equal(t, 12, e.Calls)
				assert.Equal(t, 12, e.LeafSpans)
				assert.Equal(t, 12, e.WorstCase)
				require.Len(t, e.Nested, 2)
				assert.Equal(t, "runtime", e.Nested[0].Layer)
				require.NotEmpty(t, e.Advice)
				assert.Equal(t, "single_owner", e.Advice[0].Kind)
				assert.Contains(t, e.Advice[0].Text, "cuts the worst case from 12 to 4")
				assert.Contains(t, text, "trace "+res.TraceID+"\nruntime  ")
			case "sdk-retries":
				// The SDK's own retries, seen: each physical request a
				// CLIENT span, numbered by its resend count.
				assert.Equal(t, 36, calls)
				resends := map[int]int{}
				for _, l := range leaves {
					assert.Equal(t, 3, l.Kind)
					assert.Equal(t, "POST", l.Name)
					assert.Equal(t, "POST", l.str("http.request.method"))
					assert.Equal(t, 503, l.num("http.response.status_code"))
					resends[l.num("http.request.resend_count")]++
				}
				assert.Equal(t, map[int]int{0: 12, 1: 12, 2: 12}, resends)
			case "invalid-api-key":
				assert.Equal(t, 1, calls)
				assert.True(t, strings.HasPrefix(res.Diagnosis, "failed permanently: "), res.Diagnosis)
				for _, s := range spans {
					for _, kv := range s.Attributes {
						assert.NotContains(t, string(kv.Value), "sk-demo-0000", "the API key reached Jaeger")
					}
				}
			}
		})
	}
}

// jaegerBinary returns the Jaeger binary RETRACE_JAEGER_BIN names or, without
// it, builds Jaeger (or finds it built) with scripts/jaeger.sh. When the
// build fails, Jaeger is a missing part (see needPart): the test fails in CI
// and skips, saying why, elsewhere.
// jaegerAndDemo starts a real Jaeger on free ports and builds the demo,
// the two every end-to-end test of the demo's traces begins with; root is
// the repository's.
func jaegerAndDemo(t *testing.T) (j *jaeger, agent, root string) {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	j = startJaeger(t, jaegerBinary(t, root), filepath.Join(root, "tools", "jaeger", "config.yaml"))
	return j, buildDemo(t, root), root
}

func jaegerBinary(t *testing.T, root string) string {
	t.Helper()
	if bin := os.Getenv("RETRACE_JAEGER_BIN"); bin != "" {
		info, err := os.Stat(bin)
		require.NoError(t, err, "RETRACE_JAEGER_BIN names no Jaeger binary")
		require.False(t, info.IsDir(), "RETRACE_JAEGER_BIN=%s is a directory", bin)
		return bin
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "jaeger.sh"), "build")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		needPart(t, "Jaeger could not be built from the Go module proxy, so traces cannot be checked in a real Jaeger: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

type jaeger struct {
	otlpPort, otlpHTTPPort, queryPort string // OTLP/gRPC, OTLP/HTTP, the query API
}

// startJaeger runs Jaeger on free ports of 127.0.0.1 and stops it, by its
// PID, when the test ends, printing its log if the test failed.
func startJaeger(t *testing.T, bin, config string) *jaeger {
	ports := freePorts(t, 5)
	j := &jaeger{otlpPort: ports[0], otlpHTTPPort: ports[3], queryPort: ports[1]}
	cmd := exec.Command(bin, "--config", config)
	cmd.Env = append(os.Environ(),
		"JAEGER_OTLP_GRPC_PORT="+ports[0], "JAEGER_QUERY_PORT="+ports[1],
		"JAEGER_QUERY_GRPC_PORT="+ports[2], "JAEGER_OTLP_HTTP_PORT="+ports[3], "JAEGER_HEALTH_PORT="+ports[4])
	exited, log := startLogged(t, "jaeger", cmd)

	health := "http://127.0.0.1:" + ports[4] + "/status"
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("jaeger exited at start: %v\n%s", err, log.String())
		default:
		}
		if resp, err := http.Get(health); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger was not healthy after 60 s:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond) // polling a process we do not control
	}
}

// trace fetches a trace from /api/v3/traces/{id}, waiting for Jaeger to
// have stored all of it: the root span, and no new spans between two reads.
func (j *jaeger) trace(t *testing.T, id string) *otlpTrace {
	url := "http://127.0.0.1:" + j.queryPort + "/api/v3/traces/" + id
	deadline := time.Now().Add(30 * time.Second)
	last := -1
	for {
		tr, err := fetch(url)
		if err == nil && tr.root() != nil {
			if n := len(tr.spans()); n == last {
				return tr
			} else {
				last = n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not in Jaeger after 30 s (last error: %v)", id, err)
		}
		time.Sleep(300 * time.Millisecond) // polling Jaeger's store
	}
}

func fetch(url string) (*otlpTrace, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var tr otlpTrace
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, err
	}
	return &tr, nil
}

func freePorts(t *testing.T, n int) []string {
	var ls []net.Listener
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls = append(ls, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// startLogged starts cmd, a server the test runs, with its output in a
// buffer, and stops it by its PID when the test ends, printing the output
// if the test failed. exited reports how it ended; a reader that takes the
// value puts it back, for the cleanup to take.
func startLogged(t *testing.T, name string, cmd *exec.Cmd) (exited chan error, log *syncBuffer) {
	t.Helper()
	log = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s log:\n%s", name, log.String())
		}
	})
	return exited, log
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// otlpTrace is the OTLP JSON that Jaeger's API v3 answers with.
type otlpTrace struct {
	Result struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []keyValue `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Spans []*span `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	} `json:"result"`
}

type span struct {
	SpanID       string     `json:"spanId"`
	ParentSpanID string     `json:"parentSpanId"`
	Name         string     `json:"name"`
	Kind         int        `json:"kind"` // OTLP: 1 internal, 3 client
	Attributes   []keyValue `json:"attributes"`
	Status       struct {
		Code int `json:"code"`
	} `json:"status"`
}

type keyValue struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func (s *span) value(key string) map[string]any {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			var v map[string]any
			if json.Unmarshal(kv.Value, &v) == nil {
				return v
			}
		}
	}
	return nil
}

func (s *span) str(key string) string {
	v, _ := s.value(key)["stringValue"].(string)
	return v
}

// num reads an intValue, which OTLP JSON writes as a string.
func (s *span) num(key string) int {
	switch v := s.value(key)["intValue"].(type) {
	case string:
		n, _ := strconv.Atoi(v)
		return n
	case float64:
		return int(v)
	}
	return 0
}

func (t *otlpTrace) spans() []*span {
	var out []*span
	for _, rs := range t.Result.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			out = append(out, ss.Spans...)
		}
	}
	return out
}

func (t *otlpTrace) service() string {
	for _, rs := range t.Result.ResourceSpans {
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				var v map[string]any
				if json.Unmarshal(kv.Value, &v) == nil {
					s, _ := v["stringValue"].(string)
					return s
				}
			}
		}
	}
	return ""
}

func (t *otlpTrace) root() *span {
	for _, s := range t.spans() {
		if s.ParentSpanID == "" {
			return s
		}
	}
	return nil
}

func (t *otlpTrace) children(p *span) []*span {
	var out []*span
	for _, s := range t.spans() {
		if s.ParentSpanID == p.SpanID {
			out = append(out, s)
		}
	}
	return out
}

func (t *otlpTrace) layer(name string) []*span {
	var out []*span
	for _, s := range t.spans() {
		if s.str("retrace.layer") == name && s.num("retrace.attempt") == 0 && s.str("retrace.policy") == "" {
			out = append(out, s)
		}
	}
	return out
}

// leafSpans are the layer spans beneath which no retrace layer started: the
// calls that reached the provider (model calls, or the SDK's requests).
func (t *otlpTrace) leafSpans() []*span {
	var out []*span
	for _, s := range t.spans() {
		if s.str("retrace.layer") == "" || s.num("retrace.attempt") != 0 || s.str("retrace.policy") != "" {
			continue
		}
		switch s.str("error.type") {
		case "circuit_open", "bulkhead_full", "rate_limited":
			continue // refused by a policy: it reached nothing
		}
		if !t.hasLayerBeneath(s) {
			out = append(out, s)
		}
	}
	return out
}

// hasLayerBeneath reports whether a retrace layer started beneath s.
func (t *otlpTrace) hasLayerBeneath(s *span) bool {
	for _, c := range t.children(s) {
		if c.str("retrace.layer") != "" && c.str("retrace.policy") == "" && c.num("retrace.attempt") == 0 {
			return true
		}
		if t.hasLayerBeneath(c) {
			return true
		}
	}
	return false
}
