package retracetemporal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"

	retracetemporal "github.com/retrace-go/retrace/contrib/temporal"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		runCrashWorker() // a worker process of TestCrashResumeOnTwoWorkers
	}
	goleak.VerifyTestMain(m)
}

// Each class of failure is handed to Temporal as an ApplicationError whose
// type is the class, retryable only when retrying can help, with the
// provider's Retry-After as the next delay, and retrace's reading in its
// details.
func TestApplicationError(t *testing.T) {
	cfg := retracetemporal.Config{}
	for _, tt := range []struct {
		name      string
		err       error
		class     string
		retryable bool
		delay     time.Duration
	}{
		{"503", &policies.Error{StatusCode: 503, Message: "upstream unavailable"}, "transient", true, 0},
		{"429 with Retry-After", &policies.Error{StatusCode: 429, RetryAfter: 5 * time.Second, Message: "slow down"}, "transient", true, 5 * time.Second},
		{"429 insufficient_quota", &policies.Error{StatusCode: 429, Code: "insufficient_quota", Message: "You exceeded your current quota"}, "fatal", false, 0},
		{"401", &policies.Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"}, "permanent", false, 0},
		{"context overflow", &policies.Error{StatusCode: 400, Code: "context_length_exceeded", Message: "maximum context length"}, "context_overflow", false, 0},
		{"a plain error no rule knows", errors.New("the frobnicator jammed"), "unknown", false, 0},
		{"a retry budget that refused", &policies.Error{Class: policies.Transient, Type: "503", Outcome: "budget_exhausted", Attempts: 2}, "transient", false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := cfg.ApplicationError(tt.err)
			var app *temporal.ApplicationError
			require.ErrorAs(t, got, &app)
			assert.Equal(t, tt.class, app.Type())
			assert.Equal(t, !tt.retryable, app.NonRetryable())
			assert.Equal(t, tt.delay, app.NextRetryDelay())
			assert.ErrorIs(t, got, tt.err, "the cause is kept")
			var f retracetemporal.Failure
			require.NoError(t, app.Details(&f))
			assert.Equal(t, tt.class, f.Class)
		})
	}
	t.Run("what Temporal records holds no secret", func(t *testing.T) {
		const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
		err := fmt.Errorf("POST /v1/chat: Authorization: Bearer sk-proj-abcdefghijklmnop1234: %w",
			fmt.Errorf("tenant key %s refused", key))
		got := retracetemporal.Config{Secrets: []string{key}}.ApplicationError(err)
		// What the worker sends to the server, as Temporal's own converter
		// writes it: every failure of the chain, with its details.
		recorded, jerr := protojson.Marshal(temporal.GetDefaultFailureConverter().ErrorToFailure(got))
		require.NoError(t, jerr)
		assert.NotContains(t, string(recorded), key)
		assert.NotContains(t, string(recorded), "abcdefghijklmnop1234")
		assert.Contains(t, string(recorded), "REDACTED")
		var app *temporal.ApplicationError
		require.ErrorAs(t, got, &app)
		assert.Contains(t, app.Error(), "[REDACTED]")
		assert.ErrorIs(t, got, err, "the activity's process still reaches the error")
	})
	t.Run("unknown, retried when asked", func(t *testing.T) {
		var app *temporal.ApplicationError
		require.ErrorAs(t, retracetemporal.Config{RetryUnknown: true}.ApplicationError(errors.New("the frobnicator jammed")), &app)
		assert.False(t, app.NonRetryable())
	})
	t.Run("as it was", func(t *testing.T) {
		mine := temporal.NewNonRetryableApplicationError("mine", "MyType", nil)
		for _, err := range []error{nil, context.Canceled, mine} {
			assert.Equal(t, err, cfg.ApplicationError(err))
		}
	})
}

// An open breaker's refusal asks Temporal to come back when its cool-down
// ends.
func TestOpenBreakerSetsTheNextDelay(t *testing.T) {
	cb := policies.NewCircuitBreaker[struct{}](policies.BreakerConfig{Delay: time.Minute})
	cb.Open()
	call := middleware.Policies[struct{}, struct{}]("model", cb)(func(context.Context, struct{}) (struct{}, error) {
		t.Fatal("an open breaker called the handler")
		return struct{}{}, nil
	})
	_, err := call(context.Background(), struct{}{})
	require.Error(t, err)
	var app *temporal.ApplicationError
	require.ErrorAs(t, retracetemporal.Config{}.ApplicationError(err), &app)
	assert.False(t, app.NonRetryable())
	assert.Positive(t, app.NextRetryDelay())
	assert.LessOrEqual(t, app.NextRetryDelay(), time.Minute)
}

// A workflow's activity runs one session turn (4 attempts of its own)
// against a fault server, under Temporal's retry policy: the interceptor
// lets Temporal retry what can succeed and stops what cannot, and each
// activity attempt is a retrace root whose worst case multiplies Temporal's
// attempts by the session's.
func TestActivityAttemptsByClass(t *testing.T) {
	for _, tt := range []struct {
		name        string
		fault       retracetest.Fault
		maxAttempts int32 // the activity's retry policy; 0: Temporal's default, no limit
		attempts    int   // activity attempts Temporal made
		requests    int   // what the provider received
		errorType   string
		chain       string // the nested-retry event
		worst       int64  // each attempt's worst case; 0: none stated
	}{
		{"503 always", retracetest.ServerError(503), 3, 3, 12, "transient", "temporal(3) × session(4)", 12},
		{"429 insufficient_quota", retracetest.InsufficientQuota(), 3, 1, 1, "fatal", "temporal(3) × session(4)", 12},
		{"401", retracetest.InvalidAPIKey(), 3, 1, 1, "permanent", "temporal(3) × session(4)", 12},
		// Temporal's default policy, without a limit: the test
		// environment's clock decides how many attempts fit in the
		// schedule-to-close timeout (0: not checked); each costs 4.
		{"503 always, no limit", retracetest.ServerError(503), 0, 0, 0, "transient", "temporal(?) × session(4)", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := retracetest.New(retracetest.Always(tt.fault))
			require.NoError(t, srv.Start())
			t.Cleanup(srv.Close)
			transport := &http.Transport{}
			t.Cleanup(transport.CloseIdleConnections)
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

			attempts := 0
			turn := func(ctx context.Context, prompt string) (string, error) {
				attempts++
				s, err := session.New(session.Config{
					Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test", HTTPClient: &http.Client{Transport: transport}}),
					Model:    "gpt-test",
					Retry:    policies.RetryConfig{MaxAttempts: 4}, // no backoff
					Options:  []middleware.Option{middleware.WithTracerProvider(tp)},
				})
				if err != nil {
					return "", err
				}
				msg, err := s.Run(ctx, prompt)
				return msg.Content, err
			}
			agent := func(ctx workflow.Context, prompt string) (string, error) {
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					StartToCloseTimeout:    time.Minute,
					ScheduleToCloseTimeout: 20 * time.Second,
					RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: tt.maxAttempts},
				})
				var out string
				err := workflow.ExecuteActivity(ctx, turn, prompt).Get(ctx, &out)
				return out, err
			}

			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			cfg := retracetemporal.Config{Options: []middleware.Option{middleware.WithTracerProvider(tp)}}
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{retracetemporal.NewInterceptor(cfg)}})
			env.RegisterWorkflow(agent)
			env.RegisterActivity(turn)
			env.ExecuteWorkflow(agent, "status?")
			require.True(t, env.IsWorkflowCompleted())
			err := env.GetWorkflowError()
			require.Error(t, err)
			var app *temporal.ApplicationError
			require.ErrorAs(t, err, &app)
			assert.Equal(t, tt.errorType, app.Type())
			if tt.attempts == 0 {
				require.Greater(t, attempts, 1, "Temporal retried without a limit")
				tt.attempts, tt.requests = attempts, 4*attempts
			}
			assert.Equal(t, tt.attempts, attempts, "activity attempts")
			assert.Equal(t, tt.requests, srv.Requests(), "requests the provider received")

			// One retrace root per activity attempt, numbered as Temporal
			// numbers it, its calls its own.
			total := int64(0)
			var roots []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if !s.Parent().IsValid() {
					roots = append(roots, s)
				}
			}
			require.Len(t, roots, tt.attempts)
			for i, root := range roots {
				assert.Equal(t, retracetemporal.LayerName, attrOf(root, "retrace.layer"))
				assert.EqualValues(t, i+1, attrOf(root, "temporal.activity.attempt"), "the attempt's number, as Temporal gives it")
				counts, err := retracetest.TraceCounts(retracetest.ByTrace(rec.Ended())[i])
				require.NoError(t, err)
				assert.Equal(t, counts.LeafSpans, int(counts.Calls), "leaf spans = retrace.calls")
				assert.Equal(t, tt.worst, counts.WorstCase)
				assert.Equal(t, []string{tt.chain}, retracetest.NestedChains(root))
				total += counts.Calls
			}
			assert.EqualValues(t, tt.requests, total, "requests the provider received = retrace.calls, summed over the attempts")
		})
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key string) any {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

// The workflow's task budget counts Temporal's retries with the session's:
// a workflow with 2 retries in all stops when they are spent, whichever
// layer spends them.
func TestTaskBudgetAcrossAttempts(t *testing.T) {
	for _, tt := range []struct {
		name            string
		sessionAttempts int
		attempts        int // activity attempts Temporal made
		requests        int
	}{
		// The session retries twice in the first attempt: nothing left.
		{"the session spends it", 4, 1, 3},
		// Without session retries, Temporal's retries draw: 1 + 2.
		{"Temporal spends it", 1, 3, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := retracetest.New(retracetest.Always(retracetest.ServerError(503)))
			require.NoError(t, srv.Start())
			t.Cleanup(srv.Close)
			transport := &http.Transport{}
			t.Cleanup(transport.CloseIdleConnections)
			attempts := 0
			turn := func(ctx context.Context, prompt string) (string, error) {
				attempts++
				s, err := session.New(session.Config{
					Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test", HTTPClient: &http.Client{Transport: transport}}),
					Model:    "gpt-test",
					Retry:    policies.RetryConfig{MaxAttempts: tt.sessionAttempts},
				})
				if err != nil {
					return "", err
				}
				msg, err := s.Run(ctx, prompt)
				return msg.Content, err
			}
			agent := func(ctx workflow.Context, prompt string) (string, error) {
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					StartToCloseTimeout: time.Minute,
					RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10},
				})
				var out string
				err := workflow.ExecuteActivity(ctx, turn, prompt).Get(ctx, &out)
				return out, err
			}
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{retracetemporal.NewInterceptor(retracetemporal.Config{TaskBudget: 2})}})
			env.RegisterWorkflow(agent)
			env.RegisterActivity(turn)
			env.ExecuteWorkflow(agent, "status?")
			require.True(t, env.IsWorkflowCompleted())
			err := env.GetWorkflowError()
			var app *temporal.ApplicationError
			require.ErrorAs(t, err, &app)
			assert.True(t, app.NonRetryable(), "a spent budget stops Temporal")
			var f retracetemporal.Failure
			require.NoError(t, app.Details(&f))
			assert.Equal(t, "budget_exhausted", f.Outcome)
			assert.Equal(t, tt.attempts, attempts, "activity attempts that ran")
			assert.Equal(t, tt.requests, srv.Requests(), "requests the provider received")
		})
	}
}
