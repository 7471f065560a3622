package middleware

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/policies"
)

// scope is the instrumentation scope of retrace's spans and metrics.
const scope = "github.com/retrace-go/retrace"

// scopeOpts give the scope retrace's version and the conventions' schema.
var (
	scopeOpts      = []trace.TracerOption{trace.WithInstrumentationVersion(instrument.Version), trace.WithSchemaURL(instrument.SchemaURL)}
	meterScopeOpts = []metric.MeterOption{metric.WithInstrumentationVersion(instrument.Version), metric.WithSchemaURL(instrument.SchemaURL)}
)

// Spec is what a layer knows of its responses: the policies it runs its
// handler through and how it reads a call's result. Its type parameter is
// the layer's response type, so that a policy or a reader of any other type
// fails to compile where the layer is built rather than at its first call.
// The zero Spec is a layer with no policies that only traces its calls.
type Spec[Resp any] struct {
	// Policies are the failsafe-go policies the handler runs through,
	// outermost first as failsafe.With lists them (a retry, a circuit
	// breaker, a bulkhead, a timeout, or any other); nil ones are skipped.
	Policies []failsafe.Policy[Resp]
	// EndAttributes, when set, gives the attributes each layer span gets as
	// it ends, read off the call's result: for a model call that covers its
	// retries, the usage, response model and finish reasons of the attempt
	// that ended it. It gets the zero response on failure, with the error.
	// A value that is, or holds, a secret of the call is written
	// [REDACTED], since an answer may echo a credential.
	EndAttributes func(resp Resp, err error) []attribute.KeyValue
	// GenAIMetrics, when set, makes the layer a GenAI model call for
	// metrics: each call records gen_ai.client.operation.duration
	// (seconds, wall time as a span's, with error.type when it failed) and,
	// when it succeeded, gen_ai.client.token.usage for the input and output
	// tokens it reads off the response. ok false says the response tells
	// nothing of its usage; a count of 0 is not recorded either, so that a
	// provider that reports no usage does not fill the histogram with
	// zeros. Both metrics carry the layer's gen_ai.operation.name,
	// gen_ai.provider.name, gen_ai.request.model and server.address
	// attributes ([WithAttributes]).
	GenAIMetrics func(resp Resp) (input, output int, ok bool)
}

// Policies is [Layer] with only its policies, on the global tracer and
// meter providers as they are at call time.
func Policies[Req, Resp any](layer string, ps ...failsafe.Policy[Resp]) Middleware[Req, Resp] {
	return Layer[Req, Resp](layer, Spec[Resp]{Policies: ps})
}

// Layer is the layer name: it runs the handler through the failsafe-go
// policies of spec, listed outermost first as in failsafe.With, reads its
// results as spec says, with every other setting an option, and traces it:
//
//	call := middleware.Layer[Prompt, Reply]("session", middleware.Spec[Reply]{
//		Policies: []failsafe.Policy[Reply]{policies.NewRetry[Reply](policies.SessionRetry)},
//	}, middleware.WithTracerProvider(tp))(handler)
//
// It is the one constructor of a layer:
//
//   - a layer span (retrace.layer=layer) covers the whole call and ends with
//     retrace.outcome, and retrace.retry.depth when a retrying layer
//     encloses it; a retrying layer's span also gets retrace.attempts,
//     retrace.max_attempts and, on failure, retrace.diagnosis; the outermost
//     layer span gets retrace.calls and retrace.calls.worst_case, and no
//     retrace.max_attempts when the worst case equals it;
//   - a retrying layer opens one child span per attempt (retrace.attempt,
//     retrace.retry.delay_ms); a failed attempt has status Error,
//     retrace.error.class, retrace.error.reason and error.type, and an error
//     that a retry then fixed stays on its attempt span; a failed layer span
//     has status Error, retrace.error.class and error.type, and the reason
//     and Retry-After hint only when it narrates no attempts (its attempts'
//     spans tell them);
//   - inside each attempt, a circuit breaker, bulkhead or timeout that acts
//     opens a span of its own around the inner handler ([WithPolicySpans]).
//
// Settings given once reach every policy they concern: a policy's own
// classifier, else the layer's ([WithClassifier]), else the defaults, for
// the retry and the breaker alike; a policy's own clock, else the layer's
// ([WithClock]), for retry sleeps, breaker cool-downs, timeouts and bulkhead
// waits. The task budget ([policies.WithTaskBudget]) bounds every retry
// beneath it, a plain failsafe-go retry policy's too.
//
// retrace's own policies (policies.NewRetry, NewCircuitBreaker, NewBulkhead,
// NewTimeout) and any failsafe-go circuit breaker are driven by retrace
// itself, so that each attempt's context, with its span, reaches the handler.
// Any other failsafe-go policy (a plain retrypolicy, a rate limiter, a
// fallback, a hedge) runs through failsafe-go's executor, with attempt spans
// for a plain retry policy too.
//
// A layer with no retry policy passes its handler's error through
// unchanged. A retrying layer that gives up returns a *policies.Error that
// says why and wraps the last error, or, when it stops after one attempt on
// an inner layer's stop for the same reason, that error unchanged. A panic
// in the handler is recovered into a *policies.Error (class Programming,
// type panic, never retried) so that no permit leaks; it is the one place retrace
// recovers a handler's panics.
func Layer[Req, Resp any](name string, spec Spec[Resp], opts ...Option) Middleware[Req, Resp] {
	cfg := newConfig(opts)
	return newLayer[Req, Resp](name, cfg, spec, newNamed[Req, Resp](name, cfg)).middleware()
}

// layer is what a layer's constructor builds once and every call shares:
// its policies as recognised, the retry among them, the judge, the role
// (how a call shows in the trace), the instruments. A call's own state is a
// call (call.go).
type layer[Req, Resp any] struct {
	announced     atomic.Pointer[nestedChain] // the last nested chain its calls announced (nesting.go)
	name          string
	cfg           config
	role          role[Req, Resp]
	genai         *genAI[Resp]    // nil unless the layer is a GenAI call (genai.go)
	ps            []policy[Resp]  // outermost first
	retryAt       int             // index in ps of the retry policy retrace drives, -1 if none
	retry         *engine.Retry   // that policy's limits, nil if none
	judge         judge           // that policy's judge, else a default one
	maxAttempts   int             // 1 when not retrying; 0 when a retry policy's limit is unknown
	frameAttempts int             // maxAttempts times the handler's own attempts and steps
	foreignRetry  bool            // a failsafe-go retry policy retrace cannot read
	gates         []breakerPolicy // the breakers inside the retry loop, asked before a retry
	tracer        atomic.Pointer[tracerFor]
	meter         *instruments                // on the layer's provider, else the global one when the layer was built
	inherited     atomic.Pointer[instruments] // on the provider of the enclosing layer, when it is another
	state         *stateMeter                 // decisions made locally when a shared state failed
	reuse         reuse                       // what its calls share of what they make, made once or given back
}

// reuse is what a layer's calls share of what each would otherwise make:
// the attributes of their spans made once, the last status text redacted,
// buffers and failure records given back by calls that ended.
type reuse struct {
	attrs    sync.Pool   // *[]attribute.KeyValue: a span's attributes while it ends (the SDK copies them)
	ok       okAttrs     // the attributes of a call that succeeds at its first attempt, made once
	failed   failedMemo  // the attributes of attempts that failed in the ways the layer fails, made once for each (attempt.go)
	statuses redact.Memo // the span status texts of its failures, redacted (statusText)
	fails    sync.Pool   // *failures its ended calls gave back (call.release)
	// recycles: the layer drives every policy itself, so that nothing of a
	// call runs once it ended, and its failures go back to fails.
	recycles bool
}

type tracerFor struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
}

// newLayer builds the layer name of role r: spec's policies as recognised,
// its readers of the result, and the instruments.
func newLayer[Req, Resp any](name string, cfg config, spec Spec[Resp], r role[Req, Resp]) *layer[Req, Resp] {
	l := &layer[Req, Resp]{name: name, cfg: cfg, role: r, retryAt: -1, maxAttempts: 1}
	for _, p := range spec.Policies {
		if p != nil {
			l.ps = append(l.ps, recognize(p))
		}
	}
	l.reuse.recycles = true
	for _, p := range l.ps {
		// A policy failsafe-go runs may run the call's attempts on
		// goroutines of its own that outlive it (a hedge's): their record
		// of the call's failures is theirs until the last of them ends, and
		// is not given back.
		l.reuse.recycles = l.reuse.recycles && p.driven()
	}
	for i, p := range l.ps {
		if p.retry != nil && l.retryAt < 0 {
			l.retryAt, l.retry, l.judge = i, p.retry.Engine(), p.retry
			l.maxAttempts = l.retry.MaxAttempts
		} else if p.failsafeRetry {
			l.foreignRetry, l.maxAttempts = true, 0 // failsafe-go's retry policy does not say its limit
		}
	}
	if l.retryAt >= 0 {
		for _, p := range l.ps[l.retryAt+1:] {
			if p.breaker != nil {
				l.gates = append(l.gates, p.breaker)
			}
		}
	}
	if l.judge == nil {
		// A layer without retrace's retry judges as one that makes a single
		// attempt, with the layer's classifier.
		l.judge = recognize(failsafe.Policy[Resp](policies.NewRetry[Resp](policies.RetryConfig{MaxAttempts: 1}))).retry
	}
	l.frameAttempts = l.maxAttempts
	if cfg.inner > 1 {
		l.frameAttempts *= cfg.inner
	}
	if cfg.steps > 1 {
		l.frameAttempts *= cfg.steps
	}
	l.makeOK()
	l.genai = newGenAI(spec)
	mp := cfg.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	l.meter = newInstruments(mp, name, cfg, l.genai.metrics())
	l.state = newStateMeter(mp, name)
	return l
}

// middleware is the layer around a handler: each handler it wraps gets its
// chain of steps, built once; every call of it is served by the layer.
func (l *layer[Req, Resp]) middleware() Middleware[Req, Resp] {
	return func(next Handler[Req, Resp]) Handler[Req, Resp] {
		return (&bound[Req, Resp]{l: l, body: l.build(next)}).serve
	}
}

// retrying reports whether the layer runs a retry loop of its own.
func (l *layer[Req, Resp]) retrying() bool { return l.retry != nil || l.foreignRetry }

func (l *layer[Req, Resp]) clock() clock.Clock { return l.cfg.clock }

// providers are the tracer and meter providers a call uses: the layer's
// own (WithTracerProvider, WithMeterProvider), else those of the enclosing
// layer's call, else the global ones as they are now. A layer nested in
// another without options of its own (an SDK's request middleware inside a
// user's session layer) records where the enclosing one does, so that no
// span is lost to a provider nobody exports.
func (l *layer[Req, Resp]) providers(parent *frame) (trace.TracerProvider, metric.MeterProvider) {
	tp, mp := l.cfg.tp, l.cfg.mp
	if parent != nil {
		if tp == nil {
			tp = parent.tp
		}
		if mp == nil {
			mp = parent.mp
		}
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return tp, mp
}

// tracerOf returns the tracer of tp, made once per provider.
func (l *layer[Req, Resp]) tracerOf(tp trace.TracerProvider) trace.Tracer {
	if t := l.tracer.Load(); t != nil && t.tp == tp {
		return t.tracer
	}
	t := &tracerFor{tp: tp, tracer: tp.Tracer(scope, scopeOpts...)}
	l.tracer.Store(t)
	return t.tracer
}

// metersOf returns the layer's instruments on mp: those built with the
// layer, or, for another provider (an enclosing layer's), instruments made
// once for it.
func (l *layer[Req, Resp]) metersOf(mp metric.MeterProvider) *instruments {
	if mp == l.meter.mp {
		return l.meter
	}
	if in := l.inherited.Load(); in != nil && in.mp == mp {
		return in
	}
	in := newInstruments(mp, l.name, l.cfg, l.genai.metrics())
	l.inherited.Store(in)
	return in
}

// attrBuf returns a buffer for a span's attributes, to give back with
// l.reuse.attrs.Put once the span has them: the span copies what it is given, and
// a traced call then allocates no attribute slice of its own.
func (l *layer[Req, Resp]) attrBuf() *[]attribute.KeyValue {
	if b, ok := l.reuse.attrs.Get().(*[]attribute.KeyValue); ok {
		return b
	}
	b := make([]attribute.KeyValue, 0, 16)
	return &b
}

// step is one stage of a layer: a policy around the rest of the chain.
type step[Req, Resp any] func(ctx context.Context, c *call[Req, Resp], req Req) (Resp, error)

// build composes the layer's steps around next: the policies before the
// retry policy run once per call, the retry loop runs the rest per attempt.
func (l *layer[Req, Resp]) build(next Handler[Req, Resp]) step[Req, Resp] {
	s := leafStep(next)
	if l.retryAt < 0 {
		return l.wrap(l.ps, s)
	}
	s = l.wrap(l.ps[l.retryAt+1:], s)
	s = loopStep(l.retry, s)
	return l.wrap(l.ps[:l.retryAt], s)
}

// wrap wraps s in the policies ps, outermost first. Consecutive policies that
// retrace does not drive itself share one failsafe-go executor.
func (l *layer[Req, Resp]) wrap(ps []policy[Resp], s step[Req, Resp]) step[Req, Resp] {
	for i := len(ps) - 1; i >= 0; {
		if ps[i].driven() {
			s = l.drive(ps[i], s)
			i--
			continue
		}
		j := i
		for j > 0 && !ps[j-1].driven() {
			j--
		}
		s = l.foreignStep(ps[j:i+1], s)
		i = j - 1
	}
	return s
}

// drive returns the step that drives p, a policy retrace drives itself,
// around s.
func (l *layer[Req, Resp]) drive(p policy[Resp], s step[Req, Resp]) step[Req, Resp] {
	switch {
	case p.breaker != nil:
		return l.breakerStep(p.breaker, s)
	case p.bulkhead != nil:
		return l.bulkheadStep(p.bulkhead, s)
	case p.timeout != nil:
		return l.timeoutStep(p.timeout, s)
	}
	return l.foreignBreakerStep(p.foreignBreaker, s)
}
