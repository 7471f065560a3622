package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/telemetry/setup"
)

// The demo on a real dev server: per fault, the provider's requests, the
// leaf spans and retrace.calls agree, and Temporal stops what retrying
// cannot fix.
func TestDemo(t *testing.T) {
	rows, err := collect(context.Background())
	if errors.Is(err, errNoServer) {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, writeTable(&out, rows), out.String())
	table := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 7 {
			table[f[0]] = f[1:]
		}
	}
	for name, want := range map[string][]string{
		"always-503":                  {"3", "12", "12", "12", "ok", "gave"},
		"insufficient-quota":          {"1", "1", "1", "1", "ok", "stopped:", "fatal"},
		"invalid-api-key":             {"1", "1", "1", "1", "ok", "stopped:", "permanent"},
		"rate-limited-retry-after-2s": {"3", "12", "12", "12", "ok", "gave"},
	} {
		require.Contains(t, table, name, out.String())
		assert.Equal(t, want, table[name][:len(want)], name)
	}
	assert.Contains(t, out.String(), "nested retries temporal(3) × session(4)")

	// What -json and -spans hand the demo's temporal scenario: per fault,
	// the figures above, a wait between each two attempts, and the trace,
	// whole, in the file.
	rep := reportOf(rows)
	require.Len(t, rep.Faults, len(faults))
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	require.NoError(t, writeSpans(path, rows))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	rss, err := setup.ReadOTLPJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	inFile := map[string]int{}
	for _, rs := range rss {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				inFile[hex.EncodeToString(s.TraceId)]++
			}
		}
	}
	for i, f := range rep.Faults {
		assert.Equal(t, faults[i].name, f.Fault)
		assert.Len(t, f.GapsMs, f.ActivityAttempts-1, f.Fault)
		assert.EqualValues(t, 12, f.WorstCase, "%s: temporal(3) × session(4)", f.Fault)
		assert.Equal(t, f.ProviderRequests, f.LeafSpans, f.Fault)
		assert.Len(t, f.TraceID, 32, f.Fault)
		assert.Equal(t, len(rows[i].trace), inFile[f.TraceID], "%s: every span of its trace in the file", f.Fault)
	}
}
