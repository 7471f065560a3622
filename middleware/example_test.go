package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

func ExampleChain() {
	trace := func(name string) middleware.Middleware[string, string] {
		return func(next middleware.Handler[string, string]) middleware.Handler[string, string] {
			return func(ctx context.Context, req string) (string, error) {
				fmt.Println(name, "before")
				defer fmt.Println(name, "after")
				return next(ctx, req)
			}
		}
	}
	h := middleware.Chain(trace("first"), nil, trace("second"))(func(context.Context, string) (string, error) {
		fmt.Println("handler")
		return "", nil
	})
	_, _ = h(context.Background(), "")
	// Output:
	// first before
	// second before
	// handler
	// second after
	// first after
}

// Two retrying layers, as in an agent runtime around its session: the trace
// counts the provider calls they make between them.
func ExampleLayer_policies() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	clk := clock.NewVirtual(time.Unix(0, 0)) // the 2 s … 8 s backoffs pass at once
	opts := []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clk)}

	session := middleware.Layer[string, string]("session", middleware.Spec[string]{
		Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.SessionRetry)},
	}, opts...)
	runtime := middleware.Layer[string, string]("runtime", middleware.Spec[string]{
		Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.RuntimeRetry)},
	}, opts...)
	provider := func(context.Context, string) (string, error) {
		return "", &policies.Error{StatusCode: 503, Message: "service unavailable"}
	}
	_, err := runtime(session(provider))(context.Background(), "hello")

	fmt.Println(err)
	var failed *policies.Error
	if errors.As(err, &failed) {
		fmt.Println("outcome:", failed.Outcome)
	}
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.Calls || kv.Key == telemetry.CallsWorstCase {
				fmt.Printf("%s=%d\n", kv.Key, kv.Value.AsInt64())
			}
		}
	}
	// Output:
	// runtime: failed after 3 attempts: session: failed after 4 attempts: 503: service unavailable
	// outcome: failed_exhausted
	// retrace.calls=12
	// retrace.calls.worst_case=12
}

// A layer on a handler of your own: the handler is the provider call, the
// layer retries it and traces each attempt. What the layer knows of its
// responses is its Spec, of the layer's response type; every other setting
// is an option.
func ExampleLayer() {
	clk := clock.NewVirtual(time.Unix(0, 0)) // the backoffs pass at once
	calls := 0
	flaky := func(ctx context.Context, prompt string) (string, error) {
		calls++
		if calls < 3 {
			return "", &policies.Error{StatusCode: 529, Code: "overloaded_error"}
		}
		return "answer to " + prompt, nil
	}
	call := middleware.Layer[string, string]("session", middleware.Spec[string]{
		Policies: []failsafe.Policy[string]{policies.NewRetry[string](policies.SessionRetry)},
	}, middleware.WithClock(clk))(flaky)

	reply, err := call(context.Background(), "hello")
	fmt.Println(reply, err, "after", calls, "calls")
	// Output: answer to hello <nil> after 3 calls
}

// A model call's layer reads its answer: the attributes its span ends with
// and the token usage of its GenAI metrics. Both readers take the layer's
// response type, as its policies do.
func ExampleSpec() {
	type reply struct {
		Text          string
		Model         string
		Input, Output int
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	call := middleware.Layer[string, reply]("session", middleware.Spec[reply]{
		Policies: []failsafe.Policy[reply]{policies.NewRetry[reply](policies.SessionRetry)},
		EndAttributes: func(r reply, err error) []attribute.KeyValue {
			if err != nil {
				return nil
			}
			return []attribute.KeyValue{semconv.GenAIResponseModel.String(r.Model)}
		},
		GenAIMetrics: func(r reply) (input, output int, ok bool) { return r.Input, r.Output, true },
	}, middleware.WithTracerProvider(tp), middleware.WithSpanName("chat gpt-4o-mini"))(
		func(context.Context, string) (reply, error) {
			return reply{Text: "hi", Model: "gpt-4o-mini-2024-07-18", Input: 12, Output: 3}, nil
		})

	r, err := call(context.Background(), "hello")
	fmt.Println(r.Text, err)
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == semconv.GenAIResponseModel {
				fmt.Printf("%s: %s=%s\n", s.Name(), kv.Key, kv.Value.AsString())
			}
		}
	}
	// Output:
	// hi <nil>
	// chat gpt-4o-mini: gen_ai.response.model=gpt-4o-mini-2024-07-18
}
