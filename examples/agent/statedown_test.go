package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/telemetry"
)

// With the shared state down, the breaker's and the budget's decisions are
// each worker's own, counted as degraded; the task's 6 retries
// are spent and the next refused. Eight workers' first calls ask for 16
// retries before any local breaker can open (5 failures each), so the
// budget is spent whatever the machine's speed.
func TestMetricsAfterStateDown(t *testing.T) {
	m := scenarioMetrics(t, "state-down") // fails on the scenario's own problems
	degraded := m[telemetry.MetricStateDegraded]
	// A retry's breaker and budget steps are one decision, counted once
	// under the policy that says more: the breaker's.
	assert.Positive(t, count(degraded, "retrace.policy=circuit_breaker"), "breaker decisions made locally")
	assert.Positive(t, count(m[telemetry.MetricBudgetRefusals], "retrace.layer=model"), "retries refused")
	assert.Positive(t, count(m[telemetry.MetricLayerCalls], "retrace.outcome=budget_exhausted"))
}

// -scenario takes a list; a name that is not a scenario's is an error.
func TestSelectScenarios(t *testing.T) {
	got, err := selectScenarios("incident, always-503")
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "always-503", got[0].name, "in the demo's order")
	assert.Equal(t, "incident", got[1].name)
	all, err := selectScenarios("")
	require.NoError(t, err)
	assert.Len(t, all, len(scenarios()))
	_, err = selectScenarios("always-503,nope")
	assert.ErrorContains(t, err, `unknown scenario "nope"`)
}

// lineWriter hands each line written to it to a channel, so that a test
// can await one; it never blocks the writer.
type lineWriter struct {
	w     *io.PipeWriter
	lines chan string
}

func newLineWriter() *lineWriter {
	r, w := io.Pipe()
	lw := &lineWriter{w: w, lines: make(chan string, 1024)}
	go func() {
		defer close(lw.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case lw.lines <- sc.Text():
			default: // a full channel drops lines nobody awaits
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	return lw
}

func (lw *lineWriter) Write(p []byte) (int, error) { return lw.w.Write(p) }

// With OTEL_METRICS_EXPORTER=prometheus and -repeat, the demo serves its
// metrics while it runs round after round, says where on stderr, and
// stops, shutting the endpoint down, when stdin closes.
func TestRepeatServesPrometheusUntilStdinCloses(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT": "0"}[k]
	}
	stdinR, stdinW := io.Pipe()
	stderr := newLineWriter()
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"-scenario", "always-503", "-time-scale", "0.0001", "-quiet", "-repeat"}, env, stdinR, io.Discard, stderr)
		_ = stderr.w.Close()
	}()
	urlLine := regexp.MustCompile(`^agent: metrics for Prometheus at (http://127\.0\.0\.1:\d+/metrics)$`)
	var url string
	for line := range stderr.lines {
		if m := urlLine.FindStringSubmatch(line); m != nil {
			url = m[1]
			break
		}
	}
	require.NotEmpty(t, url, "the demo says where its metrics are")

	// Await a scrape that shows a round's calls.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	exhausted := regexp.MustCompile(`(?m)^retrace_layer_calls_total\{[^}]*retrace_layer="runtime"[^}]*retrace_outcome="failed_exhausted"[^}]*\} ([1-9]\d*)`)
	deadline := time.Now().Add(time.Minute)
	var body []byte
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		require.NoError(t, err)
		body, err = io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err)
		if exhausted.Match(body) {
			break
		}
	}
	require.Regexp(t, exhausted, string(body))

	require.NoError(t, stdinW.Close())
	require.NoError(t, <-done, "stdin closed: the demo ends its round and exits cleanly")
	_, err := client.Get(url)
	assert.Error(t, err, "the endpoint is shut down with the demo")
}
