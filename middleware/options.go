package middleware

import (
	"context"
	"net/http"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
)

// Option configures a [Layer], [Transport] or [SDK]. A nil Option is a
// no-op. What depends on a layer's response type is not an option but its
// [Spec], so that the compiler checks it.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options set; a layer reads it once, when it is built.
type config struct {
	tp           trace.TracerProvider
	mp           metric.MeterProvider
	classifier   *policies.Classifier
	clock        clock.Clock
	spanName     string
	attrs        []attribute.KeyValue
	kind         trace.SpanKind
	policySpans  bool
	inner        int    // the handler's own attempts (WithInnerAttempts)
	innerName    string // the retry layer that makes them (WithInnerRetries)
	steps        int    // the handler's steps (WithSteps)
	httpPolicies []failsafe.Policy[*http.Response]
	onAttempt    func(context.Context, AttemptEnd)
	// uncounted says why the layer's calls are leaves that retrace.calls
	// does not count (WithUncounted), "" when they are counted.
	uncounted string
}

func newConfig(opts []Option) config {
	c := config{kind: trace.SpanKindInternal}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// WithTracerProvider sets the tracer provider; without it the global one is
// used, as it is at call time.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the meter provider; without it the global one is used.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithClassifier sets the classifier for the layer's policies that have none
// of their own: the retry and the circuit breakers alike.
func WithClassifier(cl *policies.Classifier) Option {
	return optionFunc(func(c *config) { c.classifier = cl })
}

// WithClock sets the clock for the layer's policies that have none of their
// own: retry sleeps, breaker cool-downs, per-attempt timeouts and bulkhead
// waits.
func WithClock(clk clock.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// WithSpanName names the layer span; the default is the layer's name. Tool
// layers use "execute_tool {name}", model layers "chat {model}".
func WithSpanName(name string) Option {
	return optionFunc(func(c *config) { c.spanName = name })
}

// WithAttributes adds attributes to every layer span.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.attrs = append(c.attrs, kv...) })
}

// WithSpanKind sets the layer span's kind; the default is Internal.
func WithSpanKind(kind trace.SpanKind) Option {
	return optionFunc(func(c *config) { c.kind = kind })
}

// WithPolicySpans makes every circuit breaker, bulkhead and timeout open a
// span of its own around the inner handler on every attempt. By default a
// policy opens one only when it acts (a breaker that is open or half open, a
// bulkhead that makes the call wait or rejects it, a timeout that fires);
// otherwise its state is an attribute of the attempt span, which keeps a
// traced call at the two spans a user would add by hand.
func WithPolicySpans(always bool) Option {
	return optionFunc(func(c *config) { c.policySpans = always })
}

// WithInnerAttempts declares that the handler makes up to n attempts of its
// own that retrace does not drive, such as an SDK's built-in retries. They
// count into retrace.calls.worst_case and the nested-retry event, so that a
// hidden retry layer shows in the trace before it multiplies the calls.
func WithInnerAttempts(n int) Option {
	return optionFunc(func(c *config) { c.inner = n })
}

// WithInnerRetries is [WithInnerAttempts] for a retry layer with a name,
// such as an SDK's or an agent framework's: the nested-retry event names it
// ("session(4) × openai-go(3)"), so that whoever reads the trace knows which
// setting to change.
func WithInnerRetries(name string, attempts int) Option {
	return optionFunc(func(c *config) { c.inner, c.innerName = attempts, name })
}

// WithHTTPPolicies sets the failsafe-go policies that [Transport] and [SDK]
// run each request through (a retry, a circuit breaker, …), outermost
// first. A [Layer] takes its policies in its [Spec] and ignores it.
func WithHTTPPolicies(ps ...failsafe.Policy[*http.Response]) Option {
	return optionFunc(func(c *config) { c.httpPolicies = append(c.httpPolicies, ps...) })
}

// WithSteps declares that the handler repeats work of its own up to n times
// (an agent loop's turns, each a model call and the tools it asks for),
// marking each step with [NextStep]. The layer's worst case is n times its
// costliest step, so that retrace.calls.worst_case is never below the calls
// a loop made. Steps are not retries: they do not count in
// retrace.retry.depth or the nested-retry event.
func WithSteps(n int) Option {
	return optionFunc(func(c *config) { c.steps = n })
}

// WithUncounted makes every call of the layer a leaf that retrace.calls
// does not count, for calls that are not the downstream's work: a session's
// handshake (telemetry.UncountedHandshake), a one-way notification
// (telemetry.UncountedNotification). Each such span says why
// (retrace.uncounted), and the outermost layer span counts them apart
// (retrace.calls.uncounted), so that retrace.calls stays the requests the
// downstream served.
func WithUncounted(reason string) Option {
	return optionFunc(func(c *config) { c.uncounted = reason })
}

// AttemptEnd is how one attempt of a retrying layer ended.
type AttemptEnd struct {
	Attempt
	Err   error                   // nil on success
	Class policies.Classification // the error's classification, as the layer's spans record it
}

// WithOnAttempt calls f at the end of each attempt of the layer's retry, with
// the call's context and the attempt's classification, so that what a
// caller records of its attempts agrees with the spans.
func WithOnAttempt(f func(ctx context.Context, a AttemptEnd)) Option {
	return optionFunc(func(c *config) { c.onAttempt = f })
}
