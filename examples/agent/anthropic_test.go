package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/telemetry"
)

// The Anthropic scenarios run through the real anthropic-sdk-go client
// against the fault server's Messages API: provider requests = leaf spans =
// retrace.calls, each model span an Anthropic chat.
func TestAnthropicScenarios(t *testing.T) {
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "gpt-4o-mini"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()
	listed := map[string]bool{}
	for _, sc := range scenarios() {
		listed[sc.name] = sc.provider == providerAnthropic
	}
	for _, tc := range []struct {
		sc       scenario
		requests int
		outcome  string
		diag     string
	}{
		{anthropicOverloaded(), 3, "success", ""},
		{anthropicBilling(), 1, "failed_fatal", "failed fatally, nothing in this task can succeed: 402 billing_error"},
	} {
		t.Run(tc.sc.name, func(t *testing.T) {
			assert.True(t, listed[tc.sc.name], "in the demo's scenarios, on Anthropic's provider")
			res, err := d.scenario(context.Background(), tc.sc)
			require.NoError(t, err)
			assert.Equal(t, tc.requests, res.ProviderRequests, "provider requests")
			assert.Equal(t, res.ProviderRequests, res.LeafSpans, "leaf spans")
			assert.Equal(t, int64(res.ProviderRequests), res.Calls, "retrace.calls")
			assert.Equal(t, int64(12), res.WorstCase, "runtime 3 × session 4")
			assert.Equal(t, tc.outcome, res.Outcome)
			assert.True(t, strings.HasPrefix(res.Diagnosis, tc.diag), "diagnosis %q", res.Diagnosis)
			assert.Empty(t, res.Problems)
			assert.NotContains(t, res.Diagnosis, "sk-ant-demo")

			id, err := trace.TraceIDFromHex(res.TraceID)
			require.NoError(t, err)
			models, chats := 0, 0
			for _, s := range d.spans.trace(id) {
				switch attrOf(s, telemetry.Layer).AsString() {
				case "model":
					models++
				case "session":
					// The inference span: the logical call, its retries beneath.
					chats++
					assert.Equal(t, "chat "+anthropicModel, s.Name())
					assert.Equal(t, "anthropic", attrOf(s, semconv.GenAIProvider).AsString())
					assert.Equal(t, anthropicModel, attrOf(s, semconv.GenAIRequestModel).AsString())
				}
			}
			assert.Equal(t, tc.requests, models, "one model call per request")
			assert.Equal(t, 1, chats, "one logical model call")
		})
	}
}
