package main

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The temporal scenario on the dev server: examples/temporal's spans join
// the demo's store, and the trace read here proves the counts the command
// reported, fault by fault.
func TestTemporalScenario(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "gpt-4o-mini"}, os.Getenv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	res, err := d.temporalScenario(context.Background())
	require.NoError(t, err)
	if res.Skipped != "" {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(res.Skipped)
		}
		t.Skip(res.Skipped)
	}
	assert.Empty(t, res.Problems)
	assert.Equal(t, 12, res.ProviderRequests, "always-503: temporal(3) × session(4)")
	assert.Equal(t, 12, res.LeafSpans)
	assert.EqualValues(t, 12, res.Calls, "the activity attempts' retrace roots, added up")
	assert.EqualValues(t, 12, res.WorstCase)
	assert.Equal(t, "failed_exhausted", res.Outcome)
	require.Len(t, res.traces, len(temporalWant)-1, "the other faults' traces, for -otlp-file")
	for _, id := range res.traces {
		assert.NotEmpty(t, d.spans.trace(id), "every fault's trace is in the store")
	}
	var out bytes.Buffer
	require.NoError(t, reportTemporal(&out, res))
	for name, want := range temporalWant {
		assert.Regexp(t, name+`\s+\d+\s+`+strconv.Itoa(want.requests)+`\s+`+strconv.Itoa(want.requests)+`\s+`+strconv.Itoa(want.requests)+`\s+12\s+`+want.next, out.String())
	}
}

// Without a dev server the scenario is not run, says how to get one, and
// does not fail the demo; examples/temporal is not even built.
func TestTemporalScenarioWithoutTheServer(t *testing.T) {
	getenv := func(k string) string {
		if k == "RETRACE_CACHE" {
			return t.TempDir()
		}
		return ""
	}
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "temporal"}, getenv, nil, &out, &errs)
	require.NoError(t, err, errs.String())
	assert.Contains(t, out.String(), "not run: no Temporal dev server: build it with scripts/temporal.sh build")
	assert.Regexp(t, `temporal\s+-\s+-\s+-\s+-\s+not run`, out.String())
	assert.False(t, strings.Contains(out.String(), "StartWorkflow"), "no trace")
}
