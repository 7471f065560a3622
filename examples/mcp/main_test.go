package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The demo runs its MCP server as itself with -serve: in a test, this
	// binary.
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// The comparison the README tells: the naive loop sends search_docs 31
// requests, retrace 5 before the breaker opens, and every request's server
// span is beneath the client's span, in one trace.
func TestDemo(t *testing.T) {
	spans := filepath.Join(t.TempDir(), "spans.jsonl")
	rep, err := run(context.Background(), spans, 0.001, "gpt-4o-mini")
	require.NoError(t, err)
	assert.Equal(t, maxSteps, rep.Naive.ServerRequests)
	assert.Equal(t, "step_limit", rep.Naive.Outcome)
	assert.Equal(t, 5, rep.Governed.ServerRequests)
	assert.Equal(t, "success", rep.Governed.Outcome)
	assert.True(t, strings.HasPrefix(rep.Governed.Answer, "From search_cache"), rep.Governed.Answer)
	assert.LessOrEqual(t, rep.Governed.RetriesUsed, budget)
	for _, s := range []side{rep.Naive, rep.Governed} {
		assert.Equal(t, s.ServerRequests+s.ModelRequests+s.CacheCalls, s.LeafSpans, "requests = leaf spans")
		assert.Equal(t, int64(s.LeafSpans), s.Calls, "leaf spans = retrace.calls")
		assert.Equal(t, s.ServerRequests, s.ServerParents, "each request's server span beneath the client's")
	}
	raw, err := os.ReadFile(spans)
	require.NoError(t, err)
	assert.Contains(t, string(raw), rep.Governed.TraceID[:8], "-spans holds the runs' spans")
}
