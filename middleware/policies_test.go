package middleware_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
)

var errOverloaded = &policies.Error{StatusCode: 503, Code: "overloaded_error", Message: "Overloaded"}

// counting returns a handler that fails with the errors of script in turn
// (nil: succeed) and repeats the last one, and a count of its calls.
func counting(script ...error) (middleware.Handler[string, string], *atomic.Int64) {
	var n atomic.Int64
	return func(ctx context.Context, req string) (string, error) {
		i := n.Add(1) - 1
		err := script[min(int(i), len(script)-1)]
		if err != nil {
			return "", err
		}
		return "ok:" + req, nil
	}, &n
}

func retry(max int, base time.Duration, clk clock.Clock) failsafe.Policy[string] {
	return policies.NewRetry[string](policies.RetryConfig{MaxAttempts: max, Backoff: policies.Backoff{Base: base}, Clock: clk})
}

// Must show 1: 3 × 4 nested attempts make 12 leaf calls, and the trace says so.
func TestNestedLayersMultiply(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	leaf, calls := counting(errOverloaded)
	opts := []middleware.Option{tp}
	session := middleware.Layer[string, string]("session", spec(retry(4, 2*time.Second, clk)), opts...)
	runtime := middleware.Layer[string, string]("runtime", spec(retry(3, 1500*time.Millisecond, clk)), opts...)
	h := runtime(session(leaf))

	_, err := h(context.Background(), "hello")

	require.Error(t, err)
	assert.Equal(t, int64(12), calls.Load())
	outer := layerSpans(rec, "runtime")
	require.Len(t, outer, 1)
	o := outer[0]
	assert.Equal(t, int64(12), num(o, telemetry.Calls))
	assert.Equal(t, int64(12), num(o, telemetry.CallsWorstCase))
	assert.Equal(t, int64(3), num(o, telemetry.Attempts))
	assert.Equal(t, int64(3), num(o, telemetry.MaxAttempts))
	assert.Equal(t, "failed_exhausted", str(o, telemetry.Outcome))
	assert.Contains(t, str(o, telemetry.Diagnosis), "failed after 3 attempts")
	assert.Equal(t, codes.Error, o.Status().Code)

	inner := layerSpans(rec, "session")
	assert.Len(t, inner, 3)
	for _, s := range inner {
		assert.Equal(t, int64(1), num(s, telemetry.RetryDepth))
		assert.Equal(t, int64(4), num(s, telemetry.Attempts))
		assert.Contains(t, str(s, telemetry.Diagnosis), "failed after 4 attempts")
	}
	assert.Len(t, attemptSpans(rec, ""), 15)
	assert.Len(t, attemptSpans(rec, "session"), 12, "the leaf spans are the session's attempts")

	// The nesting was announced on the root before the calls were made.
	var announced bool
	for _, e := range o.Events() {
		if e.Name == telemetry.EventNestedRetry {
			announced = true
			assert.Contains(t, e.Attributes, telemetry.NestedLayers.String("runtime(3) × session(4)"))
			assert.Contains(t, e.Attributes, telemetry.CallsWorstCase.Int64(12))
		}
	}
	assert.True(t, announced, "a nested retry layer must be announced on the outermost span")

	// The presets' backoffs, in virtual time: 2, 4, 8 s inside, 1.5 and 3 s outside.
	s := 2 * time.Second
	assert.Equal(t, []time.Duration{s, 2 * s, 4 * s, 1500 * time.Millisecond, s, 2 * s, 4 * s, 3 * time.Second, s, 2 * s, 4 * s}, clk.Slept())

	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "runtime", fe.Layer)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, fe.Outcome)
	var api *policies.Error
	require.ErrorAs(t, err, &api, "the provider's error is reachable through both layers")
	assert.Equal(t, 503, api.StatusCode)
}

// Must show 2: a Permanent error stops at once.
func TestPermanentErrorStopsAtOnce(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	leaf, calls := counting(&policies.Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided: sk-proj-abcdefghijklmnop"})
	h := middleware.Layer[string, string]("runtime", spec(retry(3, time.Second, clk)), tp)(leaf)

	_, err := h(context.Background(), "x")

	require.Error(t, err)
	assert.Equal(t, int64(1), calls.Load())
	assert.Empty(t, clk.Slept(), "no backoff for a permanent error")
	l := layerSpans(rec, "runtime")[0]
	assert.Equal(t, "failed_permanent", str(l, telemetry.Outcome))
	assert.Regexp(t, `^failed permanently: `, str(l, telemetry.Diagnosis))
	assert.Equal(t, "permanent", str(l, telemetry.ErrorClass))
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.String(), "abcdefghijklmnop", "a secret reached span attribute %s", kv.Key)
		}
		assert.NotContains(t, s.Status().Description, "abcdefghijklmnop")
	}
	assert.NotContains(t, err.Error(), "abcdefghijklmnop")
}

// Must show 3: a failure that a retry fixes stays on its attempt span.
func TestTransientThenSuccess(t *testing.T) {
	rec, tp := recorder(t)
	leaf, calls := counting(errOverloaded, nil)
	h := middleware.Layer[string, string]("tool", spec(retry(3, time.Second, clock.NewVirtual(epoch))), tp)(leaf)

	out, err := h(context.Background(), "x")

	require.NoError(t, err)
	assert.Equal(t, "ok:x", out)
	assert.Equal(t, int64(2), calls.Load())
	l := layerSpans(rec, "tool")[0]
	assert.Equal(t, "success_after_retry", str(l, telemetry.Outcome))
	assert.NotEqual(t, codes.Error, l.Status().Code)
	_, hasClass := attr(l, telemetry.ErrorClass)
	assert.False(t, hasClass, "a fixed error is not recorded on the layer span")

	attempts := attemptSpans(rec, "tool")
	require.Len(t, attempts, 2)
	first, second := attempts[0], attempts[1]
	assert.Equal(t, int64(1), num(first, telemetry.Attempt))
	assert.Equal(t, codes.Error, first.Status().Code)
	assert.Equal(t, "transient", str(first, telemetry.ErrorClass))
	assert.Equal(t, "overloaded_error", str(first, semconv.ErrorType))
	assert.Equal(t, int64(2), num(second, telemetry.Attempt))
	assert.Equal(t, int64(1000), num(second, telemetry.RetryDelayMs))
	assert.NotEqual(t, codes.Error, second.Status().Code)
	assert.Equal(t, l.SpanContext().SpanID(), first.Parent().SpanID(), "attempt spans are children of the layer span")
}

// Must show 4: the breaker opens after 5 Transient failures, rejects without
// calling, lets one probe through after the cool-down, and closes on success.
func TestBreakerOpensAndProbes(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewFake(epoch)
	var changes []string
	breaker := policies.NewCircuitBreaker[string](policies.BreakerConfig{Name: "search_docs", Clock: clk,
		OnStateChange: func(from, to circuitbreaker.State) { changes = append(changes, from.String()+"→"+to.String()) }})
	fail := true
	var calls int
	leaf := func(ctx context.Context, _ string) (string, error) {
		calls++
		if fail {
			return "", &policies.Error{StatusCode: 429, Code: "rate_limit_exceeded"}
		}
		return "found", nil
	}
	h := middleware.Layer[string, string]("tool", spec(breaker), tp)(leaf)
	ctx := context.Background()

	for range 5 {
		_, err := h(ctx, "q")
		require.Error(t, err)
	}
	assert.Equal(t, 5, calls)

	_, err := h(ctx, "q")
	assert.Equal(t, 5, calls, "an open breaker does not reach the handler")
	require.ErrorIs(t, err, circuitbreaker.ErrOpen)
	var rej *policies.Error
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, 60*time.Second, rej.RetryAfter, "RetryAfter is the remaining cool-down")
	cls := policies.Classify(err)
	assert.Equal(t, policies.Transient, cls.Class)
	assert.Equal(t, 60*time.Second, cls.RetryAfter)
	rejected := layerSpans(rec, "tool")[5]
	assert.Equal(t, "rejected", str(rejected, telemetry.Outcome))
	assert.Equal(t, "open", str(rejected, telemetry.CircuitState))
	bs := policySpans(rec, telemetry.PolicyCircuitBreaker)
	require.Len(t, bs, 1)
	assert.Equal(t, "open", str(bs[0], telemetry.CircuitState))

	clk.Advance(43 * time.Second)
	_, err = h(ctx, "q")
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, 17*time.Second, rej.RetryAfter)

	clk.Advance(17 * time.Second)
	fail = false
	out, err := h(ctx, "q")
	require.NoError(t, err)
	assert.Equal(t, "found", out)
	assert.Equal(t, 6, calls, "exactly one probe passed")
	probe := policySpans(rec, telemetry.PolicyCircuitBreaker)
	assert.Equal(t, "half_open", str(probe[len(probe)-1], telemetry.CircuitState))
	assert.Equal(t, []string{"closed→open", "open→half-open", "half-open→closed"}, changes)

	_, err = h(ctx, "q")
	require.NoError(t, err)
	_, marked := attr(layerSpans(rec, "tool")[8], telemetry.CircuitState)
	assert.False(t, marked, "a closed breaker that let the call through did nothing worth recording")
}

// With WithPolicySpans(true) every policy spans every attempt.
func TestPolicySpansAlways(t *testing.T) {
	rec, tp := recorder(t)
	leaf, _ := counting(errOverloaded, nil)
	h := middleware.Layer[string, string]("tool", spec(retry(3, time.Second, clock.NewVirtual(epoch)), policies.NewCircuitBreaker[string](policies.BreakerConfig{}), policies.NewBulkhead[string](4, 0), policies.NewTimeout[string](time.Minute, nil)), tp, middleware.WithPolicySpans(true))(leaf)
	_, err := h(context.Background(), "q")
	require.NoError(t, err)
	breakers := policySpans(rec, telemetry.PolicyCircuitBreaker)
	require.Len(t, breakers, 2, "one per attempt")
	assert.Equal(t, "closed", str(breakers[0], telemetry.CircuitState))
	assert.Len(t, policySpans(rec, telemetry.PolicyBulkhead), 2)
	assert.Len(t, policySpans(rec, telemetry.PolicyTimeout), 2)
	attempts := attemptSpans(rec, "tool")
	// The nesting: attempt → breaker → bulkhead → timeout → the handler.
	assert.Equal(t, attempts[0].SpanContext().SpanID(), breakers[0].Parent().SpanID())
	assert.Equal(t, breakers[0].SpanContext().SpanID(), policySpans(rec, telemetry.PolicyBulkhead)[0].Parent().SpanID())
	assert.Equal(t, "transient", str(breakers[0], telemetry.ErrorClass), "the failure is on the policy spans it passed through")
}

// Must show 5: three tools share a task budget of 6 retries. Each may make 3
// attempts (2 retries); an agent that calls each of them twice would make 12
// retries without the budget.
func TestTaskBudgetSharedByTools(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	var calls atomic.Int64
	tools := map[string]middleware.Handler[string, string]{}
	names := []string{"search_docs", "fetch_url", "run_sql"}
	for _, name := range names {
		tools[name] = middleware.Layer[string, string](name, spec(retry(3, 800*time.Millisecond, clk)), tp)(
			func(context.Context, string) (string, error) {
				calls.Add(1)
				return "", errOverloaded
			})
	}
	ctx := policies.WithTaskBudget(context.Background(), 6)
	var outcomes []string
	for round := range 2 {
		for _, name := range names {
			_, err := tools[name](ctx, "q")
			require.Error(t, err)
			spans := layerSpans(rec, name)
			outcomes = append(outcomes, str(spans[round], telemetry.Outcome))
			if round == 1 {
				require.ErrorIs(t, err, budget.ErrExceeded)
				assert.Contains(t, str(spans[round], telemetry.Diagnosis), "retry budget exhausted after 1 attempt (the task's retry budget of 6 is spent)")
				assert.Equal(t, int64(0), num(spans[round], telemetry.BudgetLeft))
			}
		}
	}

	b := policies.TaskBudgetFrom(ctx)
	assert.Equal(t, 6, b.Used())
	assert.Equal(t, 3, b.Denied())
	assert.Equal(t, int64(6+6), calls.Load(), "6 first calls and at most 6 retries")
	assert.Equal(t, []string{
		"failed_exhausted", "failed_exhausted", "failed_exhausted",
		"budget_exhausted", "budget_exhausted", "budget_exhausted",
	}, outcomes)
}

// The budget holds when the tools run at once.
func TestTaskBudgetConcurrent(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	var calls atomic.Int64
	tool := middleware.Policies[string, string]("tool", retry(3, 0, clk))(func(context.Context, string) (string, error) {
		calls.Add(1)
		return "", errOverloaded
	})
	ctx := policies.WithTaskBudget(context.Background(), 6)
	done := make(chan struct{})
	for range 10 {
		go func() {
			defer func() { done <- struct{}{} }()
			_, _ = tool(ctx, "q")
		}()
	}
	for range 10 {
		<-done
	}
	assert.Equal(t, int64(10+6), calls.Load())
	assert.Equal(t, 6, policies.TaskBudgetFrom(ctx).Used())
}

// Must show 6: canceling during an 8 s backoff ends the call at once.
func TestCancelDuringBackoff(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewFake(epoch)
	leaf, calls := counting(errOverloaded)
	h := middleware.Layer[string, string]("session", spec(retry(4, 8*time.Second, clk)), tp)(leaf)
	ctx, cancel := context.WithCancel(context.Background())

	done := make(chan error, 1)
	go func() {
		_, err := h(ctx, "x")
		done <- err
	}()
	clk.BlockUntilSleepers(1) // the 8 s backoff has begun
	cancel()
	err := <-done // the fake clock never moves: only the cancellation can end the sleep

	assert.Equal(t, int64(1), calls.Load(), "no call after the cancellation")
	assert.Equal(t, epoch, clk.Now())
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, policies.Canceled, policies.Classify(err).Class)
	l := layerSpans(rec, "session")[0]
	assert.Equal(t, "canceled", str(l, telemetry.Outcome))
	assert.Equal(t, "canceled", str(l, telemetry.ErrorClass))
	assert.Contains(t, str(l, telemetry.Diagnosis), "during the 8s backoff")
}

// Must show 6, on the wall clock: the sleep ends long before its 8 s.
func TestCancelDuringBackoffWallClock(t *testing.T) {
	leaf, calls := counting(errOverloaded)
	var slept atomic.Bool
	h := middleware.Layer[string, string]("session", spec(retry(4, 8*time.Second, nil)))(
		func(ctx context.Context, req string) (string, error) {
			defer slept.Store(true)
			return leaf(ctx, req)
		})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := h(ctx, "x")
		done <- err
	}()
	for !slept.Load() {
		time.Sleep(time.Millisecond) // the handler returns just before the backoff begins
	}
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(1), calls.Load())
	assert.Less(t, time.Since(start), 8*time.Second, "the backoff was cut short")
}

// Must show 7: a server's Retry-After outweighs a shorter backoff.
func TestRetryAfterHonoured(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	leaf, _ := counting(&policies.Error{StatusCode: 429, Code: "rate_limit_exceeded", RetryAfter: 3 * time.Second}, nil)
	h := middleware.Layer[string, string]("model", spec(retry(3, 500*time.Millisecond, clk)), tp)(leaf)

	_, err := h(context.Background(), "x")

	require.NoError(t, err)
	require.Len(t, clk.Slept(), 1)
	assert.GreaterOrEqual(t, clk.Slept()[0], 3*time.Second)
	assert.Equal(t, int64(3000), num(attemptSpans(rec, "model")[1], telemetry.RetryDelayMs))
	assert.Equal(t, int64(3000), num(attemptSpans(rec, "model")[0], telemetry.RetryAfterMs))
}

// A retry that would sleep past the caller's deadline stops now and says so.
func TestDeadlineStopsRetry(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(time.Now())
	leaf, calls := counting(errOverloaded)
	h := middleware.Layer[string, string]("session", spec(retry(4, 2*time.Second, clk)), tp)(leaf)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	_, err := h(ctx, "x")

	require.Error(t, err)
	// After the 2 s backoff, 3 s are left: too few for the 4 s one.
	assert.Equal(t, int64(2), calls.Load())
	l := layerSpans(rec, "session")[0]
	assert.Equal(t, "failed_exhausted", str(l, telemetry.Outcome))
	assert.Contains(t, str(l, telemetry.Diagnosis), "failed after 2 attempts (the next retry, in 4s, would start after the deadline (3s left))")
}

func TestPanicBecomesProgrammingError(t *testing.T) {
	rec, tp := recorder(t)
	bh := policies.NewBulkhead[string](1, 0)
	var calls int
	h := middleware.Layer[string, string]("tool", spec(retry(3, time.Second, clock.NewVirtual(epoch)), bh), tp)(
		func(context.Context, string) (string, error) {
			calls++
			panic("nil map write")
		})

	_, err := h(context.Background(), "x")

	var pe *policies.Error
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, string(pe.Stack), "TestPanicBecomesProgrammingError")
	assert.Equal(t, 1, calls, "a programming error is never retried")
	assert.Equal(t, "programming", str(layerSpans(rec, "tool")[0], telemetry.ErrorClass))
	_, err = h(context.Background(), "x")
	require.ErrorAs(t, err, &pe, "the bulkhead permit was released: the second call got in")
}

func TestBulkheadRejectsWhenFull(t *testing.T) {
	rec, tp := recorder(t)
	bh := policies.NewBulkhead[string](1, 0)
	entered, release := make(chan struct{}), make(chan struct{})
	h := middleware.Layer[string, string]("tool", spec(retry(3, time.Second, clock.NewVirtual(epoch)), bh), tp)(
		func(ctx context.Context, req string) (string, error) {
			if req == "slow" {
				close(entered)
				<-release
			}
			return "ok", nil
		})
	done := make(chan error, 1)
	go func() {
		_, err := h(context.Background(), "slow")
		done <- err
	}()
	<-entered

	_, err := h(context.Background(), "fast")

	require.ErrorIs(t, err, bulkhead.ErrFull)
	close(release)
	require.NoError(t, <-done)
	var rejected []string
	for _, s := range layerSpans(rec, "tool") {
		rejected = append(rejected, str(s, telemetry.Outcome))
	}
	assert.Contains(t, rejected, "rejected")
	require.Len(t, policySpans(rec, telemetry.PolicyBulkhead), 1)
}

func TestAttemptTimeoutIsTransient(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	h := middleware.Layer[string, string]("model", spec(retry(2, 0, nil), policies.NewTimeout[string](30*time.Second, nil)), tp, middleware.WithClock(clk))(
		func(ctx context.Context, _ string) (string, error) {
			if calls.Add(1) == 1 {
				<-ctx.Done() // a provider that never answers
				return "", ctx.Err()
			}
			return "late but fine", nil
		})
	done := make(chan error, 1)
	go func() {
		_, err := h(context.Background(), "x")
		done <- err
	}()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(30 * time.Second)

	require.NoError(t, <-done)
	attempts := attemptSpans(rec, "model")
	require.Len(t, attempts, 2)
	assert.Equal(t, "transient", str(attempts[0], telemetry.ErrorClass))
	assert.Equal(t, "attempt_timeout", str(attempts[0], semconv.ErrorType))
	assert.Len(t, policySpans(rec, telemetry.PolicyTimeout), 1)
}

// Plain failsafe-go policies work too, with attempt spans for a plain retry.
func TestPlainFailsafePolicies(t *testing.T) {
	rec, tp := recorder(t)
	leaf, calls := counting(errors.New("connection refused"), errors.New("connection refused"), nil)
	rp := retrypolicy.NewBuilder[string]().WithMaxAttempts(3).Build()
	cb := circuitbreaker.NewBuilder[string]().WithFailureThreshold(10).Build()
	h := middleware.Layer[string, string]("legacy", spec(rp, cb), tp)(leaf)

	out, err := h(context.Background(), "x")

	require.NoError(t, err)
	assert.Equal(t, "ok:x", out)
	assert.Equal(t, int64(3), calls.Load())
	l := layerSpans(rec, "legacy")[0]
	assert.Equal(t, "success_after_retry", str(l, telemetry.Outcome))
	assert.Equal(t, int64(3), num(l, telemetry.Attempts))
	assert.Equal(t, int64(3), num(l, telemetry.Calls))
	attempts := attemptSpans(rec, "legacy")
	require.Len(t, attempts, 3)
	assert.Equal(t, "transient", str(attempts[0], telemetry.ErrorClass))
}

func TestPlainFailsafeRetryExhausted(t *testing.T) {
	rec, tp := recorder(t)
	leaf, _ := counting(errOverloaded)
	rp := retrypolicy.NewBuilder[string]().WithMaxAttempts(2).Build()
	_, err := middleware.Layer[string, string]("legacy", spec(rp), tp)(leaf)(context.Background(), "x")
	require.ErrorIs(t, err, retrypolicy.ErrExceeded)
	l := layerSpans(rec, "legacy")[0]
	assert.Equal(t, "failed_exhausted", str(l, telemetry.Outcome))
	assert.Contains(t, str(l, telemetry.Diagnosis), "failed after 2 attempts")
}

// failsafe-go's rate-based budget attaches to a retry from NewRetry.
func TestFailsafeBudget(t *testing.T) {
	rec, tp := recorder(t)
	b := budget.NewBuilder().WithMaxRate(0.2).WithMinConcurrency(0).Build()
	// Another call's retry is in flight: the budget's retry rate is spent.
	require.True(t, b.(interface{ TryAcquirePermit() bool }).TryAcquirePermit())
	leaf, calls := counting(errOverloaded)
	p := policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3, Budget: b, Clock: clock.NewVirtual(epoch)})
	_, err := middleware.Layer[string, string]("tool", spec(p), tp)(leaf)(context.Background(), "x")
	require.ErrorIs(t, err, budget.ErrExceeded)
	assert.Equal(t, int64(1), calls.Load())
	assert.Equal(t, "budget_exhausted", str(layerSpans(rec, "tool")[0], telemetry.Outcome))
}

func TestUnsampledAndNoopTracing(t *testing.T) {
	leaf, calls := counting(errOverloaded, nil)
	h := middleware.Policies[string, string]("tool", retry(3, time.Second, clock.NewVirtual(epoch)))(leaf)
	out, err := h(context.Background(), "x")
	require.NoError(t, err)
	assert.Equal(t, "ok:x", out)
	assert.Equal(t, int64(2), calls.Load())
}

func TestCanceledBeforeTheFirstAttempt(t *testing.T) {
	rec, tp := recorder(t)
	leaf, calls := counting(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := middleware.Layer[string, string]("tool", spec(retry(3, time.Second, clock.NewVirtual(epoch))), tp)(leaf)(ctx, "q")
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(0), calls.Load(), "a canceled call reaches nothing")
	l := layerSpans(rec, "tool")[0]
	assert.Equal(t, "canceled", str(l, telemetry.Outcome))
	assert.Equal(t, "canceled before the first attempt: context canceled", str(l, telemetry.Diagnosis))
}

// One layer beneath two chains: each root's nested-retry event tells its
// own chain, though the layer keeps the last one it worded.
func TestNestedChainPerRoot(t *testing.T) {
	rec, tp := recorder(t)
	opts := []middleware.Option{tp}
	session := middleware.Layer[string, string]("session", spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 2, RetryUnknown: true})), opts...)(
		func(context.Context, string) (string, error) { return "ok", nil })
	outer := func(name string, attempts int) middleware.Handler[string, string] {
		return middleware.Layer[string, string](name, spec(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: attempts})), opts...)(session)
	}
	runtime, agent := outer("runtime", 3), outer("agent", 5)
	want := map[string]string{"runtime": "runtime(3) × session(2)", "agent": "agent(5) × session(2)"}
	for range 2 {
		for _, h := range []middleware.Handler[string, string]{runtime, agent} {
			_, err := h(context.Background(), "x")
			require.NoError(t, err)
		}
	}
	for name, chain := range want {
		roots := layerSpans(rec, name)
		require.Len(t, roots, 2)
		for _, r := range roots {
			assert.Equal(t, []string{chain}, retracetest.NestedChains(r), "the chain %s's calls announce", name)
		}
	}
}

// A breaker that opens on a retry's failure ends the retry rejected, and
// the diagnosis says both apart: the refusal, then the failure before it.
func TestRejectedAfterTheBreakerOpensSaysBoth(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	layer := middleware.Layer[string, string]("tool", middleware.Spec[string]{Policies: []failsafe.Policy[string]{
		policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3}),
		policies.NewCircuitBreaker[string](policies.BreakerConfig{Name: "search", FailureThreshold: 2}),
	}}, middleware.WithClock(clk))
	_, err := layer(func(context.Context, string) (string, error) {
		return "", &policies.Error{Class: policies.Transient, Type: "flaky", Message: "downstream flaked"}
	})(context.Background(), "q")
	var e *policies.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, telemetry.OutcomeRejected, e.Outcome)
	assert.Equal(t, "rejected after 2 attempts: search: circuit breaker open (retry in 1m0s); the last failure: downstream flaked", e.Diagnosis())
}
