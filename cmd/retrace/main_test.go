package main

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/retracetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// The test's own binary, run as the command: a child of the
		// faultserver test.
		os.Exit(run(strings.Fields(os.Getenv(childEnv)), os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// childEnv makes the test binary run the command in it, as retrace would.
const childEnv = "RETRACE_TEST_COMMAND"

// A SIGINT sent as soon as the fault server says it serves stops it in
// order (exit 0, "stopping after 0 requests"): the handler is installed
// before the line that says it serves.
func TestFaultserverStopsOnAnEarlySignal(t *testing.T) {
	for range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=faultserver -addr 127.0.0.1:0")
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(stderr)
		var rest strings.Builder
		for lines.Scan() {
			if strings.Contains(lines.Text(), "serving ") {
				require.NoError(t, cmd.Process.Signal(os.Interrupt))
				break
			}
		}
		for lines.Scan() {
			rest.WriteString(lines.Text() + "\n")
		}
		require.NoError(t, cmd.Wait(), "exited by the signal, not through shutdown: %s", rest.String())
		assert.Contains(t, rest.String(), "stopping after 0 requests")
	}
}

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

// A -fault name of an error makes the retracetest fault it names, which
// answers in the words of the API called; 429ms is RateLimited with its hint
// in milliseconds instead.
func TestFaultNames(t *testing.T) {
	for name, want := range map[string]retracetest.Fault{
		"429":                retracetest.RateLimited(1500 * time.Millisecond),
		"503":                retracetest.ServerError(503),
		"529":                retracetest.ServerError(529),
		"invalid-api-key":    retracetest.InvalidAPIKey(),
		"insufficient-quota": retracetest.InsufficientQuota(),
		"context-overflow":   retracetest.ContextOverflow(),
		"request-too-large":  retracetest.RequestTooLarge(),
	} {
		got, err := fault(name, 1500*time.Millisecond, time.Second)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}

	ms, err := fault("429ms", 1500*time.Millisecond+1, time.Second)
	require.NoError(t, err)
	assert.Equal(t, http.Header{"Retry-After-Ms": {"1501"}}, ms.Header, "whole milliseconds, rounded up, and no Retry-After")
	assert.Equal(t, "429 rate_limit_exceeded", ms.String())
}
