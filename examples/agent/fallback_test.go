package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The first candidate's quota is spent: one request to it, one to the
// backup, which answers; the trace and the answer say so.
func TestFallbackScenario(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "gpt-4o-mini"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	res, err := d.fallback(context.Background())
	require.NoError(t, err)
	assert.Empty(t, res.Problems)
	assert.Equal(t, 2, res.ProviderRequests)
	assert.Equal(t, 2, res.LeafSpans)
	assert.Equal(t, int64(2), res.Calls)
	assert.Equal(t, int64(3*2*4), res.WorstCase, "exec (3) × two candidates × the session's 4 attempts")
	assert.Equal(t, "success", res.Outcome)
	assert.Equal(t, "answered by "+fallbackName+"/"+fallbackModel+" after openai/gpt-4o-mini failed fatally: insufficient_quota", res.Diagnosis)
	assert.Equal(t, fallbackName+"/"+fallbackModel, res.Details["answered_by"])
	assert.Equal(t, []string{"openai/gpt-4o-mini failed fatally: insufficient_quota"}, res.Details["passed_over"])
	assert.Equal(t, map[string]int{"openai": 1, fallbackName: 1}, res.Details["requests"])
}
