package retracetemporal_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retrace-go/retrace/clock"
	retracetemporal "github.com/retrace-go/retrace/contrib/temporal"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// agentRun is a user's activity: one session turn (4 attempts of its
// own) against a provider, here a fault server; it notes each
// attempt Temporal makes of it.
type agentRun struct {
	srv       *retracetest.Server
	transport *http.Transport
	tp        *sdktrace.TracerProvider

	mu       sync.Mutex
	attempts []attemptSeen
}

type attemptSeen struct {
	n  int32
	at time.Time
}

func (a *agentRun) Turn(ctx context.Context, prompt string) (string, error) {
	a.mu.Lock()
	a.attempts = append(a.attempts, attemptSeen{activity.GetInfo(ctx).Attempt, time.Now()})
	a.mu.Unlock()
	s, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: a.srv.URL(), APIKey: "sk-test", HTTPClient: &http.Client{Transport: a.transport}}),
		Model:    "gpt-test",
		// The session's own waits (a Retry-After) pass on a virtual
		// clock; Temporal's between attempts are real.
		Retry:   policies.RetryConfig{MaxAttempts: 4, Clock: clock.NewVirtual(time.Now())},
		Options: []middleware.Option{middleware.WithTracerProvider(a.tp)},
	})
	if err != nil {
		return "", err
	}
	msg, err := s.Run(ctx, prompt)
	return msg.Content, err
}

// agentWorkflow runs the turn under Temporal's retry policy (attempts 0
// is Temporal's default, without limit), within a schedule-to-close
// timeout: the session's waits stay within what is left of it.
func agentWorkflow(ctx workflow.Context, prompt string, attempts int32, scheduleToClose time.Duration) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    time.Minute,
		ScheduleToCloseTimeout: scheduleToClose,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: attempts},
	})
	var out string
	err := workflow.ExecuteActivity(ctx, "Turn", prompt).Get(ctx, &out)
	return out, err
}

// On a real Temporal dev server, each fault's activity attempts and the
// provider's requests: a fatal or permanent failure is not retried by
// Temporal, a transient one is, after the provider's Retry-After when it
// gave one.
func TestOnTheDevServer(t *testing.T) {
	c, _ := startDevServer(t)
	for i, tt := range []struct {
		name     string
		fault    retracetest.Fault
		policy   int32 // the activity's MaximumAttempts; 0: Temporal's default, no limit
		attempts int   // 0: as many as fit in the schedule-to-close timeout
		requests int
		errType  string
		minGap   time.Duration // the least time between two attempts
		chain    string
		within   time.Duration // the schedule-to-close timeout
	}{
		{"503 always", retracetest.ServerError(503), 3, 3, 12, "transient", time.Second, "temporal(3) × session(4)", 20 * time.Second},
		{"429 insufficient_quota", retracetest.InsufficientQuota(), 3, 1, 1, "fatal", 0, "temporal(3) × session(4)", 20 * time.Second},
		{"401", retracetest.InvalidAPIKey(), 3, 1, 1, "permanent", 0, "temporal(3) × session(4)", 20 * time.Second},
		{"429 with Retry-After 3 s", retracetest.RateLimited(3 * time.Second), 3, 3, 12, "transient", 3 * time.Second, "temporal(3) × session(4)", 20 * time.Second},
		{"503 always, no limit", retracetest.ServerError(503), 0, 0, 0, "transient", time.Second, "temporal(?) × session(4)", 8 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := retracetest.New(retracetest.Always(tt.fault))
			require.NoError(t, srv.Start())
			t.Cleanup(srv.Close)
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			run := &agentRun{srv: srv, transport: &http.Transport{}, tp: tp}
			t.Cleanup(run.transport.CloseIdleConnections)

			// Temporal's own tracing on the same provider, on the client and
			// the worker, as a user has it: retrace's spans join its trace.
			tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal-sdk-go")})
			require.NoError(t, err)
			tc, err := client.NewClientFromExisting(c, client.Options{Interceptors: []interceptor.ClientInterceptor{tracing}, Logger: quiet{}})
			require.NoError(t, err)
			t.Cleanup(tc.Close)
			queue := "agents-" + strconv.Itoa(i)
			w := worker.New(tc, queue, worker.Options{
				// Temporal's tracing interceptor, a client's, runs on its
				// workers too.
				Interceptors: []interceptor.WorkerInterceptor{retracetemporal.NewInterceptor(retracetemporal.Config{
					Options: []middleware.Option{middleware.WithTracerProvider(tp)},
				})},
			})
			w.RegisterWorkflow(agentWorkflow)
			w.RegisterActivityWithOptions(run.Turn, activity.RegisterOptions{Name: "Turn"})
			require.NoError(t, w.Start())
			t.Cleanup(w.Stop)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard: the workflow ends by its own timeouts
			defer cancel()
			we, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, agentWorkflow, "status?", tt.policy, tt.within)
			require.NoError(t, err)
			err = we.Get(ctx, nil)
			require.Error(t, err)
			var app *temporal.ApplicationError
			require.ErrorAs(t, err, &app)
			assert.Equal(t, tt.errType, app.Type())

			run.mu.Lock()
			seen := append([]attemptSeen(nil), run.attempts...)
			run.mu.Unlock()
			if tt.attempts == 0 {
				require.Greater(t, len(seen), 1, "Temporal retried without a limit")
				tt.attempts, tt.requests = len(seen), 4*len(seen)
			}
			require.Len(t, seen, tt.attempts, "activity attempts")
			assert.Equal(t, tt.requests, srv.Requests(), "requests the provider received")
			// One trace: the workflow's, holding every attempt's RunActivity
			// span, retrace's root beneath each, and the session's and the
			// HTTP spans beneath that.
			spans := rec.Ended()
			traces := retracetest.ByTrace(spans)
			require.Len(t, traces, 1, "one trace")
			byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			for _, s := range spans {
				byID[s.SpanContext().SpanID()] = s
			}
			var calls int64
			var roots int
			for _, s := range spans {
				if attrOf(s, "retrace.layer") != retracetemporal.LayerName {
					continue
				}
				roots++
				parent, ok := byID[s.Parent().SpanID()]
				require.True(t, ok, "retrace's root has its parent in the trace")
				assert.True(t, strings.HasPrefix(parent.Name(), "RunActivity:"), "beneath %q", parent.Name())
				counts, err := retracetest.TraceCounts(retracetest.Subtree(spans, s))
				require.NoError(t, err)
				assert.Equal(t, counts.LeafSpans, int(counts.Calls), "leaf spans = retrace.calls")
				assert.Equal(t, []string{tt.chain}, retracetest.NestedChains(s))
				calls += counts.Calls
			}
			assert.Equal(t, tt.attempts, roots, "a retrace root per activity attempt")
			assert.EqualValues(t, tt.requests, calls, "requests = retrace.calls over the attempts' roots")
			t.Logf("trace %s: %d spans", traces[0][0].SpanContext().TraceID(), len(spans))
			t.Logf("%s: %d attempts, %d requests, retrace.calls %d", tt.name, len(seen), srv.Requests(), calls)
			for j := 1; j < len(seen); j++ {
				assert.Equal(t, int32(j+1), seen[j].n, "the attempt's number, as Temporal gives it")
				gap := seen[j].at.Sub(seen[j-1].at)
				assert.GreaterOrEqual(t, gap, tt.minGap, "attempt %d came %v after the one before", j+1, gap)
				t.Logf("attempt %d: %v after attempt %d", j+1, gap.Round(10*time.Millisecond), j)
			}
		})
	}
}
