package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"

	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// A call that succeeds at its first attempt carries on its spans exactly
// the attributes the contract names, whether its layer made them
// beforehand (a call as most are) or for the call (a layer beneath
// another, under a task budget, around a nested layer, after a retry): no
// attribute missing, none added, each value the call's own. None restates
// what its absence reads as: no retrace.retry.depth of 0, and on the
// outermost layer span no retrace.max_attempts that
// retrace.calls.worst_case states.
func TestSuccessAttributes(t *testing.T) {
	ok := func(context.Context, string) (string, error) { return "ok", nil }
	kv := func(kvs ...attribute.KeyValue) []attribute.KeyValue { return kvs }
	cases := []struct {
		name string
		call func(opts []middleware.Option) (string, error)
		// want is each span's attributes, by span name.
		want map[string][]attribute.KeyValue
	}{{
		name: "a retrying layer",
		call: func(opts []middleware.Option) (string, error) {
			return middleware.Layer[string, string]("tool", spec(retry(3, 0, nil)), opts...)(ok)(context.Background(), "q")
		},
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.Outcome.String("success"),
				telemetry.Attempts.Int(1), telemetry.Calls.Int64(1), telemetry.CallsWorstCase.Int64(3)),
			"tool attempt": kv(telemetry.Attempt.Int(1)),
		},
	}, {
		name: "a layer without a retry",
		call: func(opts []middleware.Option) (string, error) {
			return middleware.Layer[string, string]("tool", spec(policies.NewBulkhead[string](4, 0)), opts...)(ok)(context.Background(), "q")
		},
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.Outcome.String("success"),
				telemetry.Calls.Int64(1), telemetry.CallsWorstCase.Int64(1)),
		},
	}, {
		name: "nested layers",
		call: func(opts []middleware.Option) (string, error) {
			session := middleware.Layer[string, string]("session", spec(retry(4, 0, nil)), opts...)
			runtime := middleware.Layer[string, string]("runtime", spec(retry(2, 0, nil)), opts...)
			return runtime(session(ok))(context.Background(), "q")
		},
		want: map[string][]attribute.KeyValue{
			"runtime": kv(telemetry.Layer.String("runtime"), telemetry.Outcome.String("success"),
				telemetry.MaxAttempts.Int(2), telemetry.Attempts.Int(1), telemetry.Calls.Int64(1), telemetry.CallsWorstCase.Int64(8)),
			"runtime attempt": kv(telemetry.Attempt.Int(1)),
			"session": kv(telemetry.Layer.String("session"), telemetry.RetryDepth.Int(1), telemetry.Outcome.String("success"),
				telemetry.MaxAttempts.Int(4), telemetry.Attempts.Int(1)),
			"session attempt": kv(telemetry.Attempt.Int(1)),
		},
	}, {
		name: "under a task budget",
		call: func(opts []middleware.Option) (string, error) {
			ctx := policies.WithTaskBudget(context.Background(), 5)
			return middleware.Layer[string, string]("tool", spec(retry(3, 0, nil)), opts...)(ok)(ctx, "q")
		},
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.Outcome.String("success"),
				telemetry.Attempts.Int(1), telemetry.BudgetLeft.Int(5),
				telemetry.Calls.Int64(1), telemetry.CallsWorstCase.Int64(3)),
			"tool attempt": kv(telemetry.Attempt.Int(1)),
		},
	}, {
		name: "after a retry",
		call: func(opts []middleware.Option) (string, error) {
			h, _ := counting(errOverloaded, nil)
			return middleware.Layer[string, string]("tool", spec(retry(3, 0, nil)), opts...)(h)(context.Background(), "q")
		},
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.Outcome.String("success_after_retry"),
				telemetry.Attempts.Int(2), telemetry.Diagnosis.String("succeeded on attempt 2"),
				telemetry.Calls.Int64(2), telemetry.CallsWorstCase.Int64(3)),
		},
	}, {
		name: "a failsafe-go retry policy",
		call: func(opts []middleware.Option) (string, error) {
			rp := retrypolicy.NewBuilder[string]().WithMaxAttempts(3).Build()
			return middleware.Layer[string, string]("tool", spec(rp), opts...)(ok)(context.Background(), "q")
		},
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.Outcome.String("success"),
				telemetry.Attempts.Int(1), telemetry.Calls.Int64(1)),
			"tool attempt": kv(telemetry.Attempt.Int(1)),
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec, tp := recorder(t)
			// Twice: the first call of a layer and the calls after it alike.
			for range 2 {
				_, err := tc.call([]middleware.Option{tp})
				require.NoError(t, err)
			}
			got := map[string][][]attribute.KeyValue{}
			for _, s := range rec.Ended() {
				if _, ok := tc.want[s.Name()]; ok {
					got[s.Name()] = append(got[s.Name()], sorted(s))
				}
			}
			for name, want := range tc.want {
				require.NotEmpty(t, got[name], "no span %q", name)
				for _, attrs := range got[name] {
					assert.Equal(t, sortedKVs(want), attrs, name)
				}
			}
		})
	}
}

func sorted(s sdktrace.ReadOnlySpan) []attribute.KeyValue { return sortedKVs(s.Attributes()) }

func sortedKVs(kvs []attribute.KeyValue) []attribute.KeyValue {
	out := append([]attribute.KeyValue(nil), kvs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// A call that fails carries on its spans exactly the attributes the
// contract names, and its status: the attempt spans each failure's class,
// error.type and the rule that decided; the layer span how the call ended,
// its class and error.type, without restating a default (no depth of 0 on
// the outermost span, no limit its worst case states) and without the
// reason its attempt spans tell.
func TestFailureAttributes(t *testing.T) {
	kv := func(kvs ...attribute.KeyValue) []attribute.KeyValue { return kvs }
	plain := errors.New("503 service unavailable")
	tool := func(fail error) func(opts []middleware.Option) error {
		return func(opts []middleware.Option) error {
			h := func(context.Context, string) (string, error) { return "", fail }
			_, err := middleware.Layer[string, string]("tool", spec(retry(3, 0, nil)), opts...)(h)(context.Background(), "q")
			return err
		}
	}
	attempt := func(n int, typ, reason string) []attribute.KeyValue {
		return kv(telemetry.Attempt.Int(n), telemetry.ErrorClass.String("transient"), semconv.ErrorType.String(typ), telemetry.ErrorReason.String(reason))
	}
	cases := []struct {
		name string
		call func(opts []middleware.Option) error
		// want is each span's attributes and status description, by span
		// name; an attempt span's by its number too.
		want   map[string][]attribute.KeyValue
		status map[string]string
	}{{
		name: "a plain error",
		call: tool(plain),
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.Outcome.String("failed_exhausted"), telemetry.Attempts.Int(3),
				telemetry.Diagnosis.String("failed after 3 attempts: 503 service unavailable"), telemetry.Calls.Int64(3), telemetry.CallsWorstCase.Int64(3),
				telemetry.ErrorClass.String("transient"), semconv.ErrorType.String("_OTHER")),
			"tool attempt 1": attempt(1, "_OTHER", "pattern: 503"),
			"tool attempt 2": attempt(2, "_OTHER", "pattern: 503"),
			"tool attempt 3": attempt(3, "_OTHER", "pattern: 503"),
		},
		status: map[string]string{"tool": "503 service unavailable", "tool attempt 1": "503 service unavailable", "tool attempt 3": "503 service unavailable"},
	}, {
		name: "a provider's answer",
		call: tool(errOverloaded),
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.Outcome.String("failed_exhausted"), telemetry.Attempts.Int(3),
				telemetry.Diagnosis.String("failed after 3 attempts: 503 overloaded_error: Overloaded"), telemetry.Calls.Int64(3), telemetry.CallsWorstCase.Int64(3),
				telemetry.ErrorClass.String("transient"), semconv.ErrorType.String("overloaded_error")),
			"tool attempt 1": attempt(1, "overloaded_error", "http 503 overloaded_error"),
			"tool attempt 3": attempt(3, "overloaded_error", "http 503 overloaded_error"),
		},
		status: map[string]string{"tool": "Overloaded", "tool attempt 2": "Overloaded"},
	}, {
		name: "nested layers",
		call: func(opts []middleware.Option) error {
			h := func(context.Context, string) (string, error) { return "", plain }
			session := middleware.Layer[string, string]("session", spec(retry(3, 0, nil)), opts...)
			runtime := middleware.Layer[string, string]("runtime", spec(retry(2, 0, nil)), opts...)
			_, err := runtime(session(h))(context.Background(), "q")
			return err
		},
		want: map[string][]attribute.KeyValue{
			"runtime": kv(telemetry.Layer.String("runtime"), telemetry.Outcome.String("failed_exhausted"), telemetry.MaxAttempts.Int(2), telemetry.Attempts.Int(2),
				telemetry.Diagnosis.String("failed after 2 attempts: session: failed after 3 attempts: 503 service unavailable"), telemetry.Calls.Int64(6), telemetry.CallsWorstCase.Int64(6),
				telemetry.ErrorClass.String("transient"), semconv.ErrorType.String("_OTHER")),
			"session": kv(telemetry.Layer.String("session"), telemetry.RetryDepth.Int(1), telemetry.Outcome.String("failed_exhausted"), telemetry.MaxAttempts.Int(3), telemetry.Attempts.Int(3),
				telemetry.Diagnosis.String("failed after 3 attempts: 503 service unavailable"),
				telemetry.ErrorClass.String("transient"), semconv.ErrorType.String("_OTHER")),
			"session attempt 3": attempt(3, "_OTHER", "pattern: 503"),
		},
		status: map[string]string{"runtime": "503 service unavailable", "session": "503 service unavailable"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec, tp := recorder(t)
			// Twice: the first call of a layer and the calls after it alike.
			for range 2 {
				require.Error(t, tc.call([]middleware.Option{tp}))
			}
			got := map[string][][]attribute.KeyValue{}
			status := map[string][]sdktrace.Status{}
			for _, s := range rec.Ended() {
				name := s.Name()
				if v, ok := attr(s, telemetry.Attempt); ok {
					name += " " + v.String()
				}
				got[name] = append(got[name], sorted(s))
				status[name] = append(status[name], s.Status())
			}
			for name, want := range tc.want {
				require.NotEmpty(t, got[name], "no span %q", name)
				for _, attrs := range got[name] {
					assert.Equal(t, sortedKVs(want), attrs, name)
				}
			}
			for name, want := range tc.status {
				require.NotEmpty(t, status[name], "no span %q", name)
				for _, st := range status[name] {
					assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: want}, st, name)
				}
			}
		})
	}
}

// The attributes a layer makes once for attempts that fail (class,
// error.type, reason by attempt number) are each failure's own, whatever
// order the failures come in and however many ways the layer fails: more
// than it keeps them for, ways that differ in one attribute only, a
// Retry-After hint, and calls that fail in different ways at once.
func TestFailedAttemptAttributesAreEachFailures(t *testing.T) {
	rec, tp := recorder(t)
	// kinds are more ways to fail than a layer keeps attributes for; some
	// differ from another only in their type or their reason.
	type kind struct{ typ, reason string }
	var kinds []kind
	for i := range 12 {
		kinds = append(kinds, kind{fmt.Sprintf("type-%d", i%5), fmt.Sprintf("reason-%d", i%7)})
	}
	kinds = append(kinds, kind{"type-0", ""})
	// Call i fails attempt n with kinds[(i+n)%len(kinds)], and every
	// fourth call's second attempt with a Retry-After hint besides.
	failOf := func(i, n int) (kind, time.Duration) {
		var after time.Duration
		if i%4 == 0 && n == 2 {
			after = time.Duration(i+1) * time.Millisecond
		}
		return kinds[(i+n)%len(kinds)], after
	}
	var calls sync.Map // trace ID → the call's request
	layer := middleware.Layer[int, string]("tool", middleware.Spec[string]{Policies: []failsafe.Policy[string]{
		policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3, MaxRetryAfter: time.Hour, Clock: clock.NewVirtual(epoch)}),
	}}, tp)
	call := layer(func(ctx context.Context, i int) (string, error) {
		calls.Store(trace.SpanContextFromContext(ctx).TraceID(), i)
		a, _ := middleware.AttemptFrom(ctx)
		k, after := failOf(i, a.N)
		return "", &policies.Error{Class: policies.Transient, Type: k.typ, Reason: k.reason, RetryAfter: after}
	})
	const n = 40
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := g; i < n; i += 2 {
				_, err := call(context.Background(), i)
				assert.Error(t, err)
			}
		})
	}
	wg.Wait()
	checked := 0
	for _, s := range rec.Ended() {
		a, ok := attr(s, telemetry.Attempt)
		if !ok {
			continue
		}
		i, ok := calls.Load(s.SpanContext().TraceID())
		require.True(t, ok, "a span of no call")
		k, after := failOf(i.(int), int(a.AsInt64()))
		reason := k.reason
		if reason == "" {
			reason = "explicit transient" // what an Error that names its class but no rule reads as
		}
		want := []attribute.KeyValue{telemetry.Attempt.Int64(a.AsInt64()), telemetry.ErrorClass.String("transient"),
			semconv.ErrorType.String(k.typ), telemetry.ErrorReason.String(reason)}
		if after > 0 {
			want = append(want, telemetry.RetryAfterMs.Int64(after.Milliseconds()))
		}
		if d, ok := attr(s, telemetry.RetryDelayMs); ok {
			want = append(want, telemetry.RetryDelayMs.Int64(d.AsInt64())) // the wait a hint made, told as any backoff is
		}
		assert.Equal(t, sortedKVs(want), sorted(s), "call %d attempt %d", i, a.AsInt64())
		checked++
	}
	assert.Equal(t, n*3, checked, "attempt spans checked")
}

// A failure whose type or reason echoes a credential the call's context
// names writes neither on its attempt span, also after calls without it
// failed the same way: what a layer made once for that failure names the
// credential, and is not what this call's span may say.
func TestFailedAttemptAttributesHoldNoKnownSecret(t *testing.T) {
	const secret = "tenant-key-4f9a"
	rec, tp := recorder(t)
	call := middleware.Layer[string, string]("tool", spec(retry(2, 0, nil)), tp)(func(context.Context, string) (string, error) {
		return "", &policies.Error{Class: policies.Transient, Type: secret, Reason: "rejected " + secret}
	})
	_, err := call(context.Background(), "q")
	require.Error(t, err)
	_, err = call(policies.WithSecrets(context.Background(), secret), "q")
	require.Error(t, err)
	var attempts []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if _, ok := attr(s, telemetry.Attempt); ok {
			attempts = append(attempts, s)
		}
	}
	require.Len(t, attempts, 4)
	for _, s := range attempts[:2] {
		typ, _ := attr(s, semconv.ErrorType)
		assert.Equal(t, secret, typ.AsString(), "without the secret named, the type is the error's")
	}
	for _, s := range attempts[2:] {
		typ, _ := attr(s, semconv.ErrorType)
		reason, _ := attr(s, telemetry.ErrorReason)
		assert.Equal(t, "_OTHER", typ.AsString())
		assert.Equal(t, "redacted", reason.AsString())
	}
}

// A call's record of its failures, given back to its layer when the call
// ends, holds nothing of that call for the next: the same error value
// failing the next call is judged again, in that call's context. Here
// context.Canceled is an inner cancellation (transient) while the caller's
// context is live, and the caller's own end once the handler canceled it.
func TestFailuresOfOneCallAreNotTheNexts(t *testing.T) {
	rec, tp := recorder(t)
	call := middleware.Layer[func(), string]("tool", spec(retry(2, 0, nil)), tp)(func(_ context.Context, cancel func()) (string, error) {
		cancel()
		return "", context.Canceled
	})
	for range 20 {
		_, err := call(context.Background(), func() {})
		require.Error(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		_, err = call(ctx, cancel)
		require.ErrorIs(t, err, context.Canceled)
	}
	var classes []string
	for _, s := range rec.Ended() {
		if _, ok := attr(s, telemetry.Attempt); !ok {
			continue
		}
		if c, ok := attr(s, telemetry.ErrorClass); ok {
			classes = append(classes, c.AsString())
		}
	}
	// Each pair: the first call's two attempts, transient; the second's
	// one, canceled.
	require.Len(t, classes, 20*3)
	for i := 0; i < len(classes); i += 3 {
		assert.Equal(t, []string{"transient", "transient", "canceled"}, classes[i:i+3], "pair %d", i/3)
	}
}
