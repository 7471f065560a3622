package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUnknownCommandSaysSo(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 2, run([]string{"frobnicate"}, &out, &errb))
	assert.Contains(t, errb.String(), `unknown command "frobnicate"`)
	assert.Equal(t, 2, run(nil, &out, &errb), "no command is a usage error")
}

func TestToolCallFlag(t *testing.T) {
	var c toolCalls
	require.NoError(t, c.Set(`search_docs={"query":"retry"}`))
	require.NoError(t, c.Set("list_files"))
	assert.Equal(t, toolCalls{
		{ID: "call_1", Name: "search_docs", Arguments: `{"query":"retry"}`},
		{ID: "call_2", Name: "list_files", Arguments: "{}"},
	}, c)
	assert.ErrorContains(t, c.Set(`x={not json`), "not JSON")
	assert.ErrorContains(t, c.Set(`={}`), "needs a name")
}

func TestFaultserverRefusesBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 1, run([]string{"faultserver", "-fault", "nope"}, &out, &errb))
	assert.Contains(t, errb.String(), `unknown fault "nope"`)
	assert.Equal(t, 1, run([]string{"faultserver", "-addr", "0.0.0.0:0"}, &out, &errb), "only loopback")
	assert.Contains(t, errb.String(), "refusing to listen")
}
