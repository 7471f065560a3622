package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir)) // the test binary plays the crash-resume child
	}
	goleak.VerifyTestMain(m)
}

func noEnv(string) string { return "" }

// Every scenario: provider requests = leaf spans = retrace.calls, with the
// outcome and diagnosis it must show.
func TestScenarios(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "gpt-4o-mini"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	for _, sc := range scenarios() {
		if sc.custom != nil {
			continue // their own tests below
		}
		t.Run(sc.name, func(t *testing.T) {
			res, err := d.scenario(context.Background(), sc)
			require.NoError(t, err)
			assert.Equal(t, sc.want.requests, res.ProviderRequests, "provider requests")
			assert.Equal(t, res.ProviderRequests-sc.want.hidden, res.LeafSpans, "leaf spans")
			assert.Equal(t, int64(res.LeafSpans), res.Calls, "retrace.calls")
			assert.GreaterOrEqual(t, res.WorstCase, res.Calls, "the worst case is never below what happened")
			assert.Equal(t, sc.want.outcome, res.Outcome)
			assert.True(t, strings.HasPrefix(res.Diagnosis, sc.want.diag), "diagnosis %q", res.Diagnosis)
			assert.Empty(t, res.Problems)
			assert.Len(t, res.TraceID, 32)
		})
	}
}

func TestWorstCaseShowsTheLayers(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "m"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	want := map[string]int64{"always-503": 12, "single-owner": 4, "hidden-layer": 36, "sdk-retries": 36}
	for _, sc := range scenarios() {
		if w, ok := want[sc.name]; ok {
			res, err := d.scenario(context.Background(), sc)
			require.NoError(t, err)
			assert.Equal(t, w, res.WorstCase, sc.name)
		}
	}
}

// The same outage, once with the SDK's retries unseen and once through
// retrace's SDK middleware: 36 requests either way; the trace sees 12 of
// them, then all 36, and names the SDK.
func TestHiddenLayerAgainstSDKRetries(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "m"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	byName := map[string]scenario{}
	for _, sc := range scenarios() {
		byName[sc.name] = sc
	}
	hidden, err := d.scenario(context.Background(), byName["hidden-layer"])
	require.NoError(t, err)
	assert.Equal(t, 36, hidden.ProviderRequests)
	assert.Equal(t, 12, hidden.LeafSpans, "the SDK's retries are not seen")
	assert.Equal(t, int64(12), hidden.Calls)

	seen, err := d.scenario(context.Background(), byName["sdk-retries"])
	require.NoError(t, err)
	assert.Equal(t, 36, seen.ProviderRequests)
	assert.Equal(t, 36, seen.LeafSpans)
	assert.Equal(t, int64(36), seen.Calls)
	id, err := trace.TraceIDFromHex(seen.TraceID)
	require.NoError(t, err)
	var chains []string
	var resends []int64
	for _, s := range d.spans.trace(id) {
		if !s.Parent().IsValid() {
			for _, e := range s.Events() {
				for _, kv := range e.Attributes {
					if kv.Key == telemetry.NestedLayers {
						chains = append(chains, kv.Value.AsString())
					}
				}
			}
		}
		if v, ok := lookup(s, semconv.HTTPResendCount); ok && s.SpanKind() == trace.SpanKindClient {
			resends = append(resends, v.AsInt64())
		}
	}
	assert.Contains(t, chains, "runtime(3) × session(4) × openai-go(3)")
	require.Len(t, resends, 36)
	assert.Equal(t, []int64{0, 1, 2}, resends[:3], "the three requests of the first SDK call")
}

func TestJSONOutput(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"-json", "-scenario", "invalid-api-key", "-time-scale", "0.0001"}, noEnv, nil, &out, &errs)
	require.NoError(t, err, errs.String())
	var obj map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &obj), out.String())
	for _, k := range []string{"scenario", "provider_requests", "leaf_spans", "calls", "outcome", "diagnosis", "trace_id", "wall_ms"} {
		assert.Contains(t, obj, k)
	}
	assert.Equal(t, "invalid-api-key", obj["scenario"])
	assert.EqualValues(t, 1, obj["provider_requests"])
	assert.Equal(t, "failed_permanent", obj["outcome"])
	assert.NotContains(t, out.String(), "sk-demo-0000", "the key never reaches the output")
}

func TestTreeAndTable(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "stream-drop", "-time-scale", "0.0001"}, noEnv, nil, &out, &errs)
	require.NoError(t, err, errs.String())
	s := out.String()
	assert.Contains(t, s, "== stream-drop:")
	assert.Contains(t, s, "└─ runtime attempt")
	assert.Regexp(t, `stream-drop\s+3\s+3\s+3\s+✓\s+success`, s)
}

func TestBadFlags(t *testing.T) {
	var out, errs bytes.Buffer
	assert.ErrorContains(t, run(context.Background(), []string{"-scenario", "nope"}, noEnv, nil, &out, &errs), `unknown scenario "nope"`)
	assert.ErrorContains(t, run(context.Background(), []string{"-time-scale", "0"}, noEnv, nil, &out, &errs), "-time-scale")
	assert.ErrorContains(t, run(context.Background(), []string{"-base-url", "http://127.0.0.1:1"}, noEnv, nil, &out, &errs), "OPENAI_API_KEY")
}

// -base-url runs one live prompt against any OpenAI-compatible endpoint;
// here the fault server stands in for one.
func TestLiveAgainstAnEndpoint(t *testing.T) {
	srv := retracetest.New(retracetest.Sequence(retracetest.ServerError(502), retracetest.Reply("Live and well.")))
	require.NoError(t, srv.Start())
	defer srv.Close()
	env := func(k string) string {
		if k == "OPENAI_API_KEY" {
			return "sk-live-0123456789abcdef"
		}
		return ""
	}
	var out, errs bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-base-url", srv.URL(), "-time-scale", "0.0001", "-json"}, env, nil, &out, &errs), errs.String())
	var res result
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	assert.Equal(t, "live", res.Scenario)
	assert.Equal(t, 2, res.ProviderRequests)
	assert.Equal(t, int64(2), res.Calls)
	assert.Equal(t, "success", res.Outcome)
	assert.Equal(t, "Bearer ***cdef", srv.Received()[0].Header.Get("Authorization"))
}

func TestIncident(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "m"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	res, err := d.incident(context.Background())
	require.NoError(t, err)
	naive, governed := res.Details["naive"].(side), res.Details["governed"].(side)
	assert.Equal(t, 31, naive.DownstreamCalls, "without governance: 31 calls until MaxSteps")
	assert.Equal(t, "step_limit", naive.Outcome)
	assert.Equal(t, 31, naive.ModelTurns)
	assert.Equal(t, 5, governed.DownstreamCalls, "5 calls, then the breaker opened")
	assert.LessOrEqual(t, governed.RetriesUsed, 6)
	assert.Equal(t, 3, governed.RetriesUsed)
	assert.Equal(t, 4, governed.ModelTurns, "search, search again, the other tool, answer")
	assert.Equal(t, "success", governed.Outcome)
	assert.Contains(t, governed.Answer, "From search_cache: cached runbook")
	assert.Equal(t, int64(res.LeafSpans), res.Calls)
	assert.GreaterOrEqual(t, res.WorstCase, res.Calls, "the loop's worst case counts its steps")
	assert.Zero(t, res.WorstCase%int64(incidentMaxSteps), "MaxSteps times the costliest step")
	assert.Empty(t, res.Problems)
}

func TestCrashResume(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "m"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	res, err := d.crashResume(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 18, res.Details["resumed_at_step"])
	assert.Equal(t, true, res.Details["steps_1_17_intact"])
	assert.Equal(t, 1, res.Details["calls_of_permanent_step"], "a recorded permanent failure is not called again")
	assert.Equal(t, 2, res.Details["calls_of_step_18"], "step 18 ran before the crash and again after it")
	assert.Equal(t, 1, res.Details["commits_of_step_18"], "its idempotency key kept the side effect single")
	assert.Equal(t, []int{9}, res.Details["recorded_failures"])
	assert.Contains(t, res.Details["first_run_exit"], "killed")
	assert.Empty(t, res.Problems)
}
