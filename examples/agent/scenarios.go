package main

import (
	"context"
	"net/http"
	"time"

	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// scenario is one run of the two retry layers against the fault server.
type scenario struct {
	name  string
	about string
	// script is what the provider does with each request.
	script retracetest.Script
	// history is the conversation before the prompt.
	history []session.Message
	// singleOwner runs exec at one attempt: the session alone retries.
	singleOwner bool
	// provider is the provider's protocol: "" for OpenAI's,
	// providerAnthropic for Anthropic's Messages API.
	provider string
	// sdkRetries turns the SDK's own retries back on: a hidden third layer.
	sdkRetries int
	// sdkSpans installs retrace's SDK middleware: the SDK's requests are
	// spans, counted, and the SDK is named as a retrying layer.
	sdkSpans bool
	// want is what the scenario must show.
	want expectation
	// custom runs a scenario that is not one exec through the two layers.
	custom func(d *demo, ctx context.Context) (result, error)
	// start, when set, begins a custom scenario's work as the demo starts:
	// a process whose real-time waits then pass while the scenarios before
	// it run. custom collects it.
	start func(d *demo, ctx context.Context)
}

type expectation struct {
	requests int    // provider requests (= leaf spans = retrace.calls, but for the hidden)
	hidden   int    // requests the trace cannot see: provider requests − hidden = leaf spans
	outcome  string // the root's retrace.outcome
	diag     string // a prefix of the root's retrace.diagnosis, "" for none
}

// hint503 is a 503 whose retry-after-ms tells the SDK to retry at once, so
// that its hidden retries cost no wall time in the demo.
func hint503() retracetest.Fault {
	f := retracetest.ServerError(503)
	f.Header = http.Header{"Retry-After-Ms": {"1"}}
	return f
}

func olderTurns(n int) []session.Message {
	var h []session.Message
	for i := range n {
		h = append(h,
			session.Message{Role: session.User, Content: "Earlier question " + string(rune('A'+i))},
			session.Message{Role: session.Assistant, Content: "Earlier answer " + string(rune('A'+i)), StopReason: session.StopEnd})
	}
	return h
}

func scenarios() []scenario {
	return []scenario{
		{
			name:   "always-503",
			about:  "the provider is down: exec (3 attempts) × session (4 attempts) = 12 provider requests",
			script: retracetest.Always(retracetest.ServerError(503)),
			want:   expectation{requests: 12, outcome: "failed_exhausted", diag: "failed after 3 attempts: session: failed after 4 attempts"},
		},
		{
			name:   "stream-drop",
			about:  "the stream ends early, then resets: errors with empty messages, which the session retries",
			script: retracetest.Sequence(retracetest.StreamEOF(2), retracetest.StreamReset(3), retracetest.OK()),
			want:   expectation{requests: 3, outcome: "success"},
		},
		{
			name:   "invalid-api-key",
			about:  "a wrong key fails identically every time: one request, failed permanently",
			script: retracetest.Always(retracetest.InvalidAPIKey()),
			want:   expectation{requests: 1, outcome: "failed_permanent", diag: "failed permanently: 401 invalid_api_key"},
		},
		{
			name:    "context-overflow",
			about:   "the history overflows the context: compaction, then one more call, not a retry",
			script:  retracetest.Sequence(retracetest.ContextOverflow(), retracetest.OK()),
			history: olderTurns(6),
			want:    expectation{requests: 2, outcome: "success"},
		},
		{
			name:   "rate-limited",
			about:  "429 with Retry-After 5 s, twice: the session waits 5 s, not its 2 s and 4 s",
			script: retracetest.Sequence(retracetest.RateLimited(5*time.Second), retracetest.RateLimited(5*time.Second), retracetest.OK()),
			want:   expectation{requests: 3, outcome: "success"},
		},
		{
			name:   "insufficient-quota",
			about:  "the quota is spent: fatal, nothing in this task can succeed, stop at once",
			script: retracetest.Always(retracetest.InsufficientQuota()),
			want:   expectation{requests: 1, outcome: "failed_fatal", diag: "failed fatally, nothing in this task can succeed: 429 insufficient_quota"},
		},
		{
			name:   "fallback",
			about:  "the same spent quota with a fallback chain: OpenAI fails fatally once, the turn passes to Anthropic, which answers: 2 requests, success, and the answer names the model that made it",
			custom: (*demo).fallback,
		},
		{
			name:        "single-owner",
			about:       "the same outage with exec at 1 attempt: the session alone retries, 4 requests instead of 12",
			script:      retracetest.Always(retracetest.ServerError(503)),
			singleOwner: true,
			want:        expectation{requests: 4, outcome: "failed_exhausted", diag: "failed after 4 attempts: 503"},
		},
		{
			name:       "hidden-layer",
			about:      "the SDK's own retries back on (2), unseen: each model call is 3 HTTP requests, 3 × 4 × 3 = 36 reach the provider, the trace sees 12 (the worst case counts 36 only because the session was told)",
			script:     retracetest.Always(hint503()),
			sdkRetries: 2,
			want:       expectation{requests: 36, hidden: 24, outcome: "failed_exhausted", diag: "failed after 3 attempts: session: failed after 4 attempts"},
		},
		{
			name:       "sdk-retries",
			about:      "the same outage with the SDK's retries visible through retrace's SDK middleware: 36 requests, 36 CLIENT spans, retrace.calls 36, and openai-go named in the nested-retry event",
			script:     retracetest.Always(hint503()),
			sdkRetries: 2,
			sdkSpans:   true,
			want:       expectation{requests: 36, outcome: "failed_exhausted", diag: "failed after 3 attempts: session: failed after 4 attempts"},
		},
		anthropicOverloaded(),
		anthropicBilling(),
		{
			name:   "incident",
			about:  "search_docs answers 429 for 30 minutes: a naive loop calls it 31 times until MaxSteps; under retrace the breaker opens after 5 calls and the model is told to use another tool",
			custom: (*demo).incident,
		},
		{name: "mcp", about: "the incident with search_docs an MCP tool in its own process, answering 429: a naive loop sends it 31 requests; under retrace the breaker opens after 5 and the model uses the other tool; the server's spans are in the client's trace", custom: (*demo).mcp},
		{
			name:   "crash-resume",
			about:  "a 30-step task in a child process killed at step 18, then run again: it resumes at step 18, keeps steps 1–17, and does not call its recorded permanent failure again",
			custom: (*demo).crashResume,
		},
		{
			name:   "fleet",
			about:  "8 workers against a provider that is down: a breaker each costs every worker its own 5 failures and probes; one breaker shared through a State (memory, or Redis at REDIS_ADDR) costs the fleet 5 and one probe per cool-down",
			custom: (*demo).fleet,
		},
		{
			name:   "state-down",
			about:  "the fleet's task during the outage with the store its workers share down too: the shared breaker and the task's budget of 6 retries decide on each worker's local state (degraded), and the budget refuses every retry past the sixth",
			custom: (*demo).stateDown,
		},
		{
			name:   "temporal",
			about:  "the outage through a Temporal workflow, one workflow per fault: Temporal's 3 activity attempts × the session's 4 = 12 requests for a 503, its waits honouring Retry-After; a spent quota or a bad key stops Temporal after 1 (needs the dev server: scripts/temporal.sh build)",
			custom: (*demo).temporalScenario,
			start:  (*demo).startTemporal,
		},
	}
}
