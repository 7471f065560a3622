//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// explained is the part of retrace explain -json that the test reads.
type explained struct {
	TraceID   string `json:"trace_id"`
	Calls     int    `json:"calls"`
	LeafSpans int    `json:"leaf_spans"`
	WorstCase int    `json:"worst_case"`
	Nested    []struct {
		Layer       string `json:"layer"`
		MaxAttempts int    `json:"max_attempts"`
	} `json:"nested"`
	Advice []struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
	} `json:"advice"`
}

// explainInJaeger runs retrace explain against Jaeger's query API.
func explainInJaeger(t *testing.T, root string, j *jaeger, traceID string) (explained, string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "retrace")
	build := exec.Command("go", "build", "-o", bin, "./cmd/retrace")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building retrace: %s", out)
	url := "http://127.0.0.1:" + j.queryPort
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "explain", "-jaeger", url, "-trace", traceID, "-json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "explain -json: %s", stderr.String())
	var e explained
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &e), stdout.String())

	stdout.Reset()
	cmd = exec.Command(bin, "explain", "-jaeger", url, "-trace", traceID)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "explain: %s", stderr.String())
	return e, stdout.String()
}
