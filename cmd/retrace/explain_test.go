package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// demoTrace runs one of the demo's scenarios and returns the file it wrote
// its trace to (-otlp-file).
func demoTrace(t *testing.T, scenario string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	out, err := exec.Command("go", "build", "-o", bin, "../../examples/agent").CombinedOutput()
	require.NoError(t, err, "building the demo: %s", out)
	file := filepath.Join(dir, scenario+".json")
	out, err = exec.Command(bin, "-scenario", scenario, "-time-scale", "0.001", "-quiet", "-otlp-file", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return file
}

func explainJSON(t *testing.T, args ...string) Analysis {
	t.Helper()
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(append([]string{"explain", "-json"}, args...), &out, &errb), errb.String())
	var a Analysis
	require.NoError(t, json.Unmarshal(out.Bytes(), &a), out.String())
	return a
}

func kinds(a Analysis) []string {
	var k []string
	for _, ad := range a.Advice {
		k = append(k, ad.Kind)
	}
	return k
}

func TestExplainAlways503(t *testing.T) {
	file := demoTrace(t, "always-503")
	a := explainJSON(t, "-otlp-file", file)
	assert.Len(t, a.TraceID, 32)
	assert.Equal(t, "failed_exhausted", a.Outcome)
	assert.Equal(t, int64(12), a.Calls)
	assert.Equal(t, 12, a.LeafSpans)
	assert.Equal(t, int64(12), a.WorstCase)
	assert.Equal(t, []NestedLayer{{Layer: "runtime", MaxAttempts: 3}, {Layer: "session", MaxAttempts: 4}}, a.Nested)
	assert.Equal(t, int64(12), a.Product)
	assert.Equal(t, int64(1500+3000+3*(2000+4000+8000)), a.BackoffMs, "the configured backoffs: runtime 1.5 s, 3 s; session 2 s, 4 s, 8 s, three times")
	assert.Equal(t, 11, a.BackoffWaits)
	assert.Equal(t, []ErrorCount{{Class: "transient", Type: "server_error", Count: 12}}, a.Errors)
	assert.Equal(t, []string{"single_owner", "add_breaker"}, kinds(a))
	assert.Contains(t, a.Advice[0].Text, "runtime.Config{SingleOwner: true} cuts the worst case from 12 to 4")

	// The text form: the tree, then the analysis.
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"explain", "-otlp-file", file}, &out, &errb), errb.String())
	text := out.String()
	assert.True(t, strings.HasPrefix(text, "trace "+a.TraceID+"\nruntime  "), text)
	assert.Contains(t, text, "calls       12 leaf calls in the trace (12 leaf spans); at worst the layers could make 12\n",
		"the trace's leaf calls against the worst case, not a share of what the provider received")
	assert.Contains(t, text, "nested      runtime(3) × session(4) = 12")
	assert.Contains(t, text, "- runtime and session both retry transient errors")
}

func TestExplainHiddenLayer(t *testing.T) {
	file := demoTrace(t, "hidden-layer")
	a := explainJSON(t, "-otlp-file", file)
	assert.Equal(t, int64(36), a.WorstCase)
	assert.Less(t, a.Calls, a.WorstCase, "the SDK's requests have no spans: fewer leaf calls than requests")
	require.Len(t, a.Nested, 3)
	assert.True(t, a.Nested[2].Hidden, "%+v", a.Nested)
	assert.Equal(t, 3, a.Nested[2].MaxAttempts)
	assert.Contains(t, kinds(a), "hidden_retries")
	for _, ad := range a.Advice {
		if ad.Kind == "hidden_retries" {
			assert.Contains(t, ad.Text, "run under a retrying session: turn them off or install retrace's SDK middleware")
			assert.Contains(t, ad.Text, "the worst case is 12, not 36")
		}
	}
	assert.Contains(t, a.Advice[0].Text, "cuts the worst case from 36 to 12")

	// The 12 are what the trace saw; the 36 count the attempts it did not.
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"explain", "-otlp-file", file}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "calls       12 leaf calls in the trace (12 leaf spans); at worst the layers could make 36, counting model's hidden attempts, which the trace does not see\n")
	assert.NotContains(t, out.String(), "33%")
}

// The incident's governed run: the breaker opened inside the tool's retry,
// which stopped at once; the loop then answered from the other tool.
func TestExplainIncident(t *testing.T) {
	a := explainJSON(t, "-otlp-file", demoTrace(t, "incident"))
	assert.Equal(t, "success", a.Outcome)
	assert.Equal(t, int64(a.LeafSpans), a.Calls)
	require.Len(t, a.Decisions, 1)
	assert.Equal(t, "rejected", a.Decisions[0].Outcome)
	assert.Contains(t, a.Decisions[0].Diagnosis, "circuit breaker open")
	assert.Equal(t, []ErrorCount{{Class: "transient", Type: "rate_limit_error", Count: 5}}, a.Errors, "5 calls before the breaker opened")
	require.NotNil(t, a.Budget)
	assert.Equal(t, 0, a.Budget.Refusals)
	assert.NotContains(t, kinds(a), "add_breaker", "a breaker acted")
}

func TestExplainRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"resourceSpans": [`), 0o600))
	cases := []struct {
		args []string
		want string
	}{
		{nil, "give -jaeger URL -trace ID, or -otlp-file FILE"},
		{[]string{"-jaeger", "http://localhost:16686"}, "-jaeger needs -trace ID"},
		{[]string{"-jaeger", "localhost:16686", "-trace", strings.Repeat("a", 32)}, "want the query service's URL"},
		{[]string{"-otlp-file", bad, "-trace", "xyz"}, "want 32 hex digits"},
		{[]string{"-otlp-file", bad}, "OTLP JSON object 1"},
		{[]string{"-otlp-file", filepath.Join(dir, "missing.json")}, "no such file"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		assert.Equal(t, 1, run(append([]string{"explain"}, c.args...), &out, &errb), "%v", c.args)
		assert.Contains(t, errb.String(), c.want, "%v", c.args)
	}
}
