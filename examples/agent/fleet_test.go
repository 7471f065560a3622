package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// In memory, each call of the fleet's shared run is a trace of its own, and
// -otlp-file gets every one: a line each, a root with its calls.
func TestFleetWritesItsTraces(t *testing.T) {
	t.Setenv("REDIS_ADDR", "") // the fleet in this process's memory
	file := filepath.Join(t.TempDir(), "fleet.json")
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "m", otlpFile: file}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	// The breaker's counts depend on the machine's speed (the fleet's
	// clock runs 1,000× the wall's); what is asked here is only what
	// reaches the file, so the scenario's own checks are not.
	res, err := d.fleet(context.Background())
	require.NoError(t, err)
	var stderr, out bytes.Buffer
	require.NoError(t, d.writeTraces(res, &stderr))
	assert.Empty(t, stderr.String())
	require.NoError(t, d.report(&out, []result{res}))
	assert.Regexp(t, `fleet\s+\d+\s+\d+\s+\d+\s`, out.String(), "the figures of the traced run, not dashes")

	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	lines, read, counted := 0, 0, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines++
		if lines%100 != 1 {
			continue // a sample of the lines is read: the trace per line is the same shape
		}
		rs, err := setup.ReadOTLPJSON(bytes.NewReader(sc.Bytes()))
		require.NoError(t, err)
		read++
		ids := map[string]bool{}
		for _, r := range rs {
			for _, ss := range r.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					ids[string(s.GetTraceId())] = true
					if len(s.GetParentSpanId()) == 0 {
						for _, kv := range s.GetAttributes() {
							if kv.GetKey() == string(telemetry.Calls) {
								counted++
							}
						}
					}
				}
			}
		}
		require.Len(t, ids, 1, "line %d: one trace a line", lines)
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, fleetWorkers*fleetCalls, lines, "a trace per call of the shared run")
	assert.Equal(t, read, counted, "each root carries its retrace.calls")
}

// A scenario whose spans this process never sees says so, rather than
// leave -otlp-file silently without it.
func TestWriteTracesSaysWhyNone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "traces.json")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	d := &demo{opts: options{otlpFile: path}, otlpFile: f}
	var stderr bytes.Buffer
	require.NoError(t, d.writeTraces(result{Scenario: "fleet", untraced: "its spans are elsewhere"}, &stderr))
	assert.Equal(t, "fleet: no trace in -otlp-file "+path+": its spans are elsewhere\n", stderr.String())
}
