package middleware_test

import (
	"context"
	"sort"
	"testing"

	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// A call that succeeds at its first attempt carries on its spans exactly
// the attributes the contract names, whether its layer made them
// beforehand (a call as most are) or for the call (a layer beneath
// another, under a task budget, around a nested layer, after a retry): no
// attribute missing, none added, each value the call's own.
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
			"tool": kv(telemetry.Layer.String("tool"), telemetry.RetryDepth.Int(0), telemetry.Outcome.String("success"),
				telemetry.MaxAttempts.Int(3), telemetry.Attempts.Int(1), telemetry.Calls.Int64(1), telemetry.CallsWorstCase.Int64(3)),
			"tool attempt": kv(telemetry.Attempt.Int(1)),
		},
	}, {
		name: "a layer without a retry",
		call: func(opts []middleware.Option) (string, error) {
			return middleware.Layer[string, string]("tool", spec(policies.NewBulkhead[string](4, 0)), opts...)(ok)(context.Background(), "q")
		},
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.RetryDepth.Int(0), telemetry.Outcome.String("success"),
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
			"runtime": kv(telemetry.Layer.String("runtime"), telemetry.RetryDepth.Int(0), telemetry.Outcome.String("success"),
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
			"tool": kv(telemetry.Layer.String("tool"), telemetry.RetryDepth.Int(0), telemetry.Outcome.String("success"),
				telemetry.MaxAttempts.Int(3), telemetry.Attempts.Int(1), telemetry.BudgetLeft.Int(5),
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
			"tool": kv(telemetry.Layer.String("tool"), telemetry.RetryDepth.Int(0), telemetry.Outcome.String("success_after_retry"),
				telemetry.MaxAttempts.Int(3), telemetry.Attempts.Int(2), telemetry.Diagnosis.String("succeeded on attempt 2"),
				telemetry.Calls.Int64(2), telemetry.CallsWorstCase.Int64(3)),
		},
	}, {
		name: "a failsafe-go retry policy",
		call: func(opts []middleware.Option) (string, error) {
			rp := retrypolicy.NewBuilder[string]().WithMaxAttempts(3).Build()
			return middleware.Layer[string, string]("tool", spec(rp), opts...)(ok)(context.Background(), "q")
		},
		want: map[string][]attribute.KeyValue{
			"tool": kv(telemetry.Layer.String("tool"), telemetry.RetryDepth.Int(0), telemetry.Outcome.String("success"),
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
