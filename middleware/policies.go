package middleware

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// scope is the instrumentation scope of retrace's spans and metrics.
const scope = "github.com/retrace-go/retrace"

// scopeOpts give the scope retrace's version and the conventions' schema.
var (
	scopeOpts      = []trace.TracerOption{trace.WithInstrumentationVersion(telemetry.Version), trace.WithSchemaURL(telemetry.SchemaURL)}
	meterScopeOpts = []metric.MeterOption{metric.WithInstrumentationVersion(telemetry.Version), metric.WithSchemaURL(telemetry.SchemaURL)}
)

// Policies runs the handler through the failsafe-go policies ps, listed
// outermost first as in failsafe.With, with the global tracer and meter
// providers as they are at call time. See [PoliciesWith].
func Policies[Req, Resp any](layer string, ps ...failsafe.Policy[Resp]) Middleware[Req, Resp] {
	return PoliciesWith[Req, Resp](layer, nil, ps...)
}

// Layer is [PoliciesWith] with every setting an option, the policies too
// ([WithPolicies]):
//
//	call := middleware.Layer[Prompt, Reply]("session",
//		middleware.WithTracerProvider(tp),
//		middleware.WithPolicies[Reply](policies.NewRetry[Reply](policies.SessionRetry)),
//	)(handler)
func Layer[Req, Resp any](name string, opts ...Option) Middleware[Req, Resp] {
	var ps []failsafe.Policy[Resp]
	for _, given := range newConfig(opts).policies {
		p, ok := given.([]failsafe.Policy[Resp])
		if !ok {
			err := &policies.Error{Class: policies.Programming, Type: "layer_config",
				Err: fmt.Errorf("middleware.Layer %q: WithPolicies was given %T, the layer's responses are %T", name, given, []failsafe.Policy[Resp]{})}
			return func(Handler[Req, Resp]) Handler[Req, Resp] {
				return func(context.Context, Req) (Resp, error) {
					var zero Resp
					return zero, err
				}
			}
		}
		ps = append(ps, p...)
	}
	return PoliciesWith[Req, Resp](name, opts, ps...)
}

// PoliciesWith runs the handler through the failsafe-go policies ps, listed
// outermost first as in failsafe.With, and traces it:
//
//   - a layer span (retrace.layer=layer) covers the whole call and ends with
//     retrace.outcome; a retrying layer's span also gets retrace.attempts,
//     retrace.max_attempts and, on failure, retrace.diagnosis; the outermost
//     layer span gets retrace.calls and retrace.calls.worst_case;
//   - a retrying layer opens one child span per attempt (retrace.attempt,
//     retrace.retry.delay_ms); a failed attempt has status Error,
//     retrace.error.class, retrace.error.reason and error.type, and an error
//     that a retry then fixed stays on its attempt span;
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
// unchanged. A retrying layer that gives up returns a *policies.FailedError
// that wraps the last error, or, when it stops after one attempt on an inner
// layer's FailedError for the same reason, that error unchanged. A panic in
// the handler is recovered into a *policies.PanicError (class Programming,
// never retried) so that no permit leaks; it is the one place retrace
// recovers a handler's panics.
func PoliciesWith[Req, Resp any](layer string, opts []Option, ps ...failsafe.Policy[Resp]) Middleware[Req, Resp] {
	l := newLayer[Req, Resp](layer, newConfig(opts), ps)
	return func(next Handler[Req, Resp]) Handler[Req, Resp] {
		body := l.build(next)
		return func(ctx context.Context, req Req) (Resp, error) {
			return l.serve(ctx, req, body)
		}
	}
}

// layer is what PoliciesWith builds once and every call shares.
type layer[Req, Resp any] struct {
	name          string
	spanName      string
	attemptName   string
	cfg           config
	ps            []failsafe.Policy[Resp]
	retryAt       int           // index in ps of the retry policy retrace drives, -1 if none
	retry         *engine.Retry // that policy's limits, nil if none
	judge         judge         // that policy's judge, else a default one
	maxAttempts   int           // 1 when not retrying; 0 when a retry policy's limit is unknown
	frameAttempts int           // maxAttempts times the handler's own attempts (WithInnerAttempts)
	foreignRetry  bool          // a failsafe-go retry policy retrace cannot read
	startOpts     []trace.SpanStartOption
	tracer        atomic.Pointer[tracerFor]
	gates         []breakerPolicy                // the breakers inside the retry loop, asked before a retry
	meter         *instruments                   // on the layer's provider, else the global one when the layer was built
	inherited     atomic.Pointer[instruments]    // on the provider of the enclosing layer, when it is another
	state         *stateMeter                    // decisions made locally when a shared state failed
	usage         func(Resp) (input, output int) // token usage of a GenAI layer's response, nil if none
	attrs         sync.Pool                      // *[]attribute.KeyValue: a span's attributes while it ends (the SDK copies them)
}

type tracerFor struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
}

func newLayer[Req, Resp any](name string, cfg config, ps []failsafe.Policy[Resp]) *layer[Req, Resp] {
	l := &layer[Req, Resp]{name: name, cfg: cfg, retryAt: -1, maxAttempts: 1}
	for _, p := range ps {
		if p != nil {
			l.ps = append(l.ps, p)
		}
	}
	for i, p := range l.ps {
		if r, ok := executorOf[retryPolicy](p); ok && l.retryAt < 0 {
			l.retryAt, l.retry, l.judge = i, r.Engine(), r
			l.maxAttempts = r.Engine().MaxAttempts
		} else if isFailsafeRetry(p) {
			l.foreignRetry, l.maxAttempts = true, 0 // failsafe-go's retry policy does not say its limit
		}
	}
	if l.judge == nil {
		// A layer without retrace's retry judges as one that makes a single
		// attempt, with the layer's classifier.
		l.judge, _ = executorOf[judge](failsafe.Policy[Resp](policies.NewRetry[Resp](policies.RetryConfig{MaxAttempts: 1})))
	}
	l.frameAttempts = l.maxAttempts
	if cfg.inner > 1 {
		l.frameAttempts *= cfg.inner
	}
	if cfg.steps > 1 {
		l.frameAttempts *= cfg.steps
	}
	l.spanName = cfg.spanName
	if l.spanName == "" {
		l.spanName = name
	}
	l.attemptName = name + " attempt"
	// The layer span is born with the user's attributes; retrace's are set
	// once, when it ends.
	if len(cfg.attrs) > 0 {
		l.startOpts = []trace.SpanStartOption{trace.WithAttributes(cfg.attrs...)}
	}
	if cfg.kind != trace.SpanKindInternal {
		l.startOpts = append(l.startOpts, trace.WithSpanKind(cfg.kind))
	}
	mp := cfg.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	l.meter = newInstruments(mp, name, cfg)
	l.state = newStateMeter(mp, name)
	l.usage, _ = cfg.usage.(func(Resp) (int, int))
	return l
}

// retrying reports whether the layer runs a retry loop of its own.
func (l *layer[Req, Resp]) retrying() bool { return l.retry != nil || l.foreignRetry }

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
	in := newInstruments(mp, l.name, l.cfg)
	l.inherited.Store(in)
	return in
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
	for _, p := range l.ps[l.retryAt+1:] {
		if b, ok := executorOf[breakerPolicy](p); ok {
			l.gates = append(l.gates, b)
		}
	}
	s = l.loopStep(s)
	return l.wrap(l.ps[:l.retryAt], s)
}

// wrap wraps s in the policies ps, outermost first. Consecutive policies that
// retrace does not drive itself share one failsafe-go executor.
func (l *layer[Req, Resp]) wrap(ps []failsafe.Policy[Resp], s step[Req, Resp]) step[Req, Resp] {
	for i := len(ps) - 1; i >= 0; {
		if d := l.driven(ps[i], s); d != nil {
			s = d
			i--
			continue
		}
		j := i
		for j > 0 && l.driven(ps[j-1], s) == nil {
			j--
		}
		s = l.foreignStep(ps[j:i+1], s)
		i = j - 1
	}
	return s
}

// driven returns the step that drives p around s, or nil when p is not a
// policy retrace drives itself.
func (l *layer[Req, Resp]) driven(p failsafe.Policy[Resp], s step[Req, Resp]) step[Req, Resp] {
	if b, ok := executorOf[breakerPolicy](p); ok {
		return l.breakerStep(b, s)
	}
	if b, ok := executorOf[bulkheadPolicy](p); ok {
		return l.bulkheadStep(b, s)
	}
	if t, ok := executorOf[timeoutPolicy](p); ok {
		return l.timeoutStep(t, s)
	}
	if cb, ok := p.(circuitbreaker.CircuitBreaker[Resp]); ok {
		return l.foreignBreakerStep(cb, s)
	}
	return nil
}

// call is one call through a layer; it is allocated once per call and
// carries everything the steps share.
type call[Req, Resp any] struct {
	l         *layer[Req, Resp]
	tracer    trace.Tracer // the configured provider's, else the enclosing layer's, else the global one's
	meter     *instruments // likewise
	req       Req
	inner     step[Req, Resp] // the per-attempt chain the retry loop runs
	frame     frame
	root      root
	fctx      frameCtx
	span      trace.Span // the layer span
	aspan     trace.Span // the current attempt span, nil outside an attempt or when not recording
	recording bool
	attempts  int
	lastEnd   time.Time // when the previous attempt ended (for a failsafe-go retry's delay)
	lastErr   error     // the last judged error and its classification
	lastCls   policies.Classification
	lastRaw   policies.Classification // lastErr's classification before the context's part (see judge.Judged)
	lastFail  engine.Failure
	rejected  bool           // this attempt was refused by the layer's own breaker or bulkhead
	report    *engine.Report // how the retry loop ended, nil if it did not run
	status    statusMemo     // the last span status worded
	budgetOut bool           // the task budget refused a failsafe-go retry policy's retry
}

// current is the span that policy state without a span of its own goes on.
func (c *call[Req, Resp]) current() trace.Span {
	if c.aspan != nil {
		return c.aspan
	}
	return c.span
}

func (l *layer[Req, Resp]) clock() clock.Clock { return l.cfg.clock }

func (l *layer[Req, Resp]) serve(ctx context.Context, req Req, body step[Req, Resp]) (Resp, error) {
	c := &call[Req, Resp]{l: l, req: req}
	parent := frameFrom(ctx)
	tp, mp := l.providers(parent)
	c.tracer, c.meter = l.tracerOf(tp), l.metersOf(mp)
	var start time.Time
	if c.meter.genai != nil {
		start = time.Now() // wall time, as spans are: a scaled clock would stretch the call
	}
	resend := -1 // the request's place in an SDK's retries, -1 when not an SDK's request
	if l.cfg.sdkAttempts > 0 {
		resend = c.initSDKFrame(parent, req)
	} else {
		c.frame.init(parent, l.name, l.frameAttempts, l.retrying() || l.cfg.inner > 1, &c.root)
		c.frame.perAttempt = l.cfg.inner > 1
		c.frame.inner, c.frame.innerName = l.cfg.inner, l.cfg.innerName
	}
	c.frame.tp, c.frame.mp = tp, mp
	c.fctx = frameCtx{Context: ctx, f: &c.frame}
	if l.cfg.http && !l.retrying() {
		// The layer call is the physical request: its span is the request's.
		name, opts := requestSpan(req, max(resend, 0), l.cfg.attrs)
		ctx, c.span = c.tracer.Start(&c.fctx, name, opts...)
	} else {
		ctx, c.span = c.tracer.Start(&c.fctx, l.spanName, withCallAttrs(ctx, parent, l.startOpts)...)
	}
	c.recording = c.span.IsRecording()
	if c.recording {
		if parent == nil {
			c.root.span = c.span
		} else {
			c.frame.announceNesting()
		}
	}

	resp, err := body(ctx, c, req)

	outcome, attempts := policies.OutcomeSuccess, max(c.attempts, 1)
	var cls policies.Classification
	switch {
	case c.report != nil:
		rep := *c.report
		outcome, attempts, cls = policies.Outcome(rep.Outcome), rep.Attempts, c.lastCls
		if rep.Err != nil || rep.Cause != nil {
			err = l.judge.Fail(c.secretCtx(ctx), l.name, rep, cls)
			cls = policies.Classify(err) // the failure's own: canceled when the caller ended it
		}
	case err != nil:
		cls = c.classify(ctx, err)
		outcome = l.outcome(ctx, c, err, cls)
		if l.retrying() || c.budgetOut {
			err = l.judge.Fail(c.secretCtx(ctx), l.name, engine.Report{Attempts: c.attempts, Outcome: string(outcome), Err: err,
				Failure: c.lastFail, Cause: causeIf(ctx, outcome)}, cls)
			cls = policies.Classify(err)
		}
	case c.attempts > 1:
		outcome = policies.OutcomeSuccessAfterRetry
	}
	if resend <= 0 {
		// An SDK's retry of a request was in the worst case its first
		// request reported.
		c.frame.reportWorst()
	}
	if c.recording && l.cfg.endAttrs != nil {
		// The answer's words (its model, its ID) may echo a credential: a
		// value Redact would change is written as [REDACTED].
		attrs, known := l.cfg.endAttrs(resp, err), c.known()
		for i, kv := range attrs {
			switch kv.Value.Type() {
			case attribute.STRING:
				if v := kv.Value.AsString(); policies.Redact(v, known...) != v {
					attrs[i] = kv.Key.String("[REDACTED]")
				}
			case attribute.STRINGSLICE:
				vs, changed := kv.Value.AsStringSlice(), false
				for j, v := range vs {
					if policies.Redact(v, known...) != v {
						vs[j], changed = "[REDACTED]", true
					}
				}
				if changed {
					attrs[i] = kv.Key.StringSlice(vs)
				}
			}
		}
		c.span.SetAttributes(attrs...)
	}
	if err != nil {
		c.frame.endedBeneath(c.beneath(err, cls)) // only a failure pays for the copy the enclosing attempt keeps
	} else {
		c.frame.endedBeneath(nil)
	}
	if err == nil && l.cfg.http && !l.retrying() {
		if x, ok := ctx.Value(exchangeKey{}).(*exchange); ok {
			// The span is the physical request's: it ends with the answer's
			// body, read to its end or closed, and says how the body ended.
			x.end = func(bodyErr error) { c.endBody(ctx, bodyErr, attempts) }
			x.event = func(eventErr error) {
				// An error event: the SDK above reports it in words of its
				// own; the layers above it read this classification.
				cls := c.classify(ctx, eventErr)
				c.frame.endedBeneath(c.beneath(eventErr, cls))
			}
			return resp, nil
		}
	}
	if c.recording {
		l.endSpan(c, outcome, attempts, cls, err)
	}
	c.span.End()
	c.meter.record(ctx, outcome, attempts, l.retrying())
	if g := c.meter.genai; g != nil {
		var in, out int
		if err == nil && l.usage != nil {
			in, out = l.usage(resp)
		}
		g.record(ctx, time.Since(start), cls.Type, err != nil, in, out)
	}
	return resp, err
}

// outcome is how a call whose error did not come out of retrace's retry
// loop ends: a policy before the loop refused it, a failsafe-go retry policy
// gave up, or the layer does not retry.
func (l *layer[Req, Resp]) outcome(ctx context.Context, c *call[Req, Resp], err error, cls policies.Classification) policies.Outcome {
	if o, ok := outcomeOf(err); ok {
		return o
	}
	switch {
	case ctx.Err() != nil:
		return policies.OutcomeCanceled
	case c.rejected:
		return policies.OutcomeRejected
	case c.budgetOut, errors.Is(err, budget.ErrExceeded):
		return policies.OutcomeBudgetExhausted
	case l.foreignRetry && cls.Class == policies.Unknown:
		return policies.OutcomeFailedExhausted // failsafe-go's retry policy retries every error
	}
	return policies.Outcome(engine.StopOutcome(string(cls.Class)))
}

// endBody ends a request's span when its answer's body has ended: with
// success, or with the failure the body ended with (a stream dropped, the
// caller's end, an error event the provider sent).
func (c *call[Req, Resp]) endBody(ctx context.Context, err error, attempts int) {
	l := c.l
	outcome, cls := policies.OutcomeSuccess, policies.Classification{}
	if err != nil {
		cls = c.classify(ctx, err)
		outcome = l.outcome(ctx, c, err, cls)
	}
	if err != nil {
		c.frame.endedBeneath(c.beneath(err, cls))
	}
	if c.recording {
		l.endSpan(c, outcome, attempts, cls, err)
	}
	c.span.End()
	c.meter.record(ctx, outcome, attempts, false)
}

func causeIf(ctx context.Context, o policies.Outcome) error {
	if o == policies.OutcomeCanceled {
		return context.Cause(ctx)
	}
	return nil
}

// endSpan sets the layer span's attributes, all in one call: how the call
// ended, and for a retrying layer its limit, attempts and diagnosis, and on
// the outermost layer the counts.
func (l *layer[Req, Resp]) endSpan(c *call[Req, Resp], outcome policies.Outcome, attempts int, cls policies.Classification, err error) {
	buf := l.attrBuf()
	defer l.attrs.Put(buf)
	attrs := append((*buf)[:0], telemetry.Layer.String(l.name), telemetry.RetryDepth.Int(c.frame.depth),
		telemetry.Outcome.String(string(outcome)))
	if l.retrying() {
		if l.maxAttempts > 0 {
			attrs = append(attrs, telemetry.MaxAttempts.Int(l.maxAttempts))
		}
		attrs = append(attrs, telemetry.Attempts.Int(attempts))
		if fe, ok := err.(*policies.FailedError); ok {
			attrs = append(attrs, telemetry.Diagnosis.String(fe.Diagnosis()))
		} else if outcome == policies.OutcomeSuccessAfterRetry {
			attrs = append(attrs, telemetry.Diagnosis.String("succeeded on attempt "+strconv.Itoa(attempts)))
		}
	} else if _, own := outcomeOf(err); own {
		// A handler that ends the layer with an outcome of its own (an agent
		// loop's step limit) says why, though the layer made no attempts.
		fe := &policies.FailedError{Outcome: outcome, Err: err}
		attrs = append(attrs, telemetry.Diagnosis.String(fe.Diagnosis()))
	}
	if b, ok := engine.BudgetFrom(c.fctx.Context).(*policies.TaskBudget); ok {
		attrs = append(attrs, telemetry.BudgetLeft.Int(b.Remaining()))
	}
	if c.frame.parent == nil {
		calls := c.root.calls.Load()
		attrs = append(attrs, telemetry.Calls.Int64(calls))
		if n := c.root.untraced.Load(); n > 0 {
			attrs = append(attrs, telemetry.CallsUntraced.Int64(n))
		}
		if w := c.frame.worst(); w > 0 {
			attrs = append(attrs, telemetry.CallsWorstCase.Int64(max(w, calls)))
		}
	}
	if err != nil {
		known := c.known()
		attrs = appendFailure(known, attrs, cls)
		c.span.SetStatus(codes.Error, c.status.of(known, err))
	}
	c.span.SetAttributes(attrs...)
	*buf = attrs
}

// attrBuf returns a buffer for a span's attributes, to give back with
// l.attrs.Put once the span has them: the span copies what it is given, and
// a traced call then allocates no attribute slice of its own.
func (l *layer[Req, Resp]) attrBuf() *[]attribute.KeyValue {
	if b, ok := l.attrs.Get().(*[]attribute.KeyValue); ok {
		return b
	}
	b := make([]attribute.KeyValue, 0, 16)
	return &b
}

// classify classifies err once per error value, as the layer's judge sees it.
// An error that says nothing of itself (no rule knows it, or it has no
// type) takes the classification of the failure beneath it: the layer call
// beneath this attempt that failed last, which read the provider's answer
// (middleware.SDK's request), so that one failure has one class on every
// span and is never guessed again from text above.
func (c *call[Req, Resp]) classify(ctx context.Context, err error) policies.Classification {
	if err != nil && sameError(err, c.lastErr) {
		return c.lastCls
	}
	c.lastErr = err
	by := c.classifier()
	if raw, ok := c.frame.classifiedBeneath(err, by); ok {
		// The layer beneath classified this failure with the same
		// classifier: its class is carried up, not worked out again from
		// the words the layers between wrapped it in.
		c.lastRaw = raw
		c.lastCls, c.lastFail = c.l.judge.Judged(ctx, raw, err)
		return c.lastCls
	}
	c.lastRaw = by.Classify(err)
	c.lastCls, c.lastFail = c.l.judge.Judged(ctx, c.lastRaw, err)
	if c.lastCls.Class == policies.Unknown || c.lastCls.Type == telemetry.ErrorTypeOther {
		if b := c.frame.failedBeneath.Load(); b != nil && b.cls.Class != policies.Unknown && b.cls.Class != policies.Canceled {
			c.lastCls, c.lastRaw = b.cls, b.cls // what the layers above carry too
			c.lastFail.Class, c.lastFail.RetryAfter = string(b.cls.Class), b.cls.RetryAfter
		}
	}
	return c.lastCls
}

// classifier is the one the layer's judge classifies with: its policy's
// own, else the layer's, else nil (the defaults).
func (c *call[Req, Resp]) classifier() *policies.Classifier {
	if own := c.l.judge.Classifier(); own != nil {
		return own
	}
	return c.l.cfg.classifier
}

// beneath is how this call's failure reads to the enclosing layer: cls, and
// the raw classification of err when this call classified err itself.
func (c *call[Req, Resp]) beneath(err error, cls policies.Classification) *beneath {
	b := &beneath{cls: cls}
	if sameError(err, c.lastErr) {
		b.err, b.raw, b.by = err, c.lastRaw, c.classifier()
	}
	return b
}

// classifyFor classifies err as policy h sees it: with the layer's cached
// classification when h classifies as the layer's judge does (neither has
// a classifier of its own, or both the same), so that one error is
// classified once.
func (c *call[Req, Resp]) classifyFor(ctx context.Context, h judge, err error) policies.Classification {
	if h.Classifier() == c.l.judge.Classifier() {
		return c.classify(ctx, err)
	}
	cls, _ := h.Judge(ctx, c.l.cfg.classifier, err)
	return cls
}

// The retry loop: call implements engine.Attempter and engine.Gate.

func (l *layer[Req, Resp]) loopStep(inner step[Req, Resp]) step[Req, Resp] {
	return func(ctx context.Context, c *call[Req, Resp], _ Req) (Resp, error) {
		c.inner = inner
		resp, rep := engine.Do[Resp](ctx, l.retry, l.clock(), c)
		c.report = &rep
		return resp, rep.Err
	}
}

func (c *call[Req, Resp]) Attempt(ctx context.Context, n int, delay time.Duration) (Resp, error) {
	c.attempts = n
	c.rejected = false
	c.frame.startAttempt(n, delay)
	if n > 1 {
		c.meter.retried(c.fctx.Context, delay)
	}
	if c.recording && c.l.retry.MaxAttempts > 1 {
		if c.l.cfg.http {
			// Each attempt is a physical request, resent n-1 times.
			name, opts := requestSpan(c.req, n-1, nil)
			ctx, c.aspan = c.tracer.Start(ctx, name, opts...)
		} else {
			ctx, c.aspan = c.tracer.Start(ctx, c.l.attemptName)
		}
	}
	return c.inner(ctx, c, c.req)
}

func (c *call[Req, Resp]) Judge(ctx context.Context, err error) engine.Failure {
	c.classify(ctx, err)
	f := c.lastFail
	if c.rejected {
		f.Rejected, f.Held = true, false
	}
	return f
}

// Refusal implements engine.Gate: a breaker inside the retry loop that is
// open, and still cooling down, would refuse the next attempt, and so would
// a request whose body cannot be sent again.
func (c *call[Req, Resp]) Refusal() error {
	if c.l.cfg.http {
		if err := unrewindable(c.req); err != nil {
			// Refused before the retry starts, so that no request span
			// stands for a request that was never sent.
			return err
		}
	}
	for _, g := range c.l.gates {
		if b := g.Engine(); b.State() == circuitbreaker.OpenState && b.Remaining(c.l.clock()) > 0 {
			return g.Rejection(c.l.clock())
		}
	}
	return nil
}

func (c *call[Req, Resp]) Done(n int, err error, d engine.Decision) {
	c.noteState(c.fctx.Context, c.current(), d.State)
	if d.Outcome == string(policies.OutcomeBudgetExhausted) {
		c.meter.refused(c.fctx.Context)
	}
	var cls policies.Classification
	if err != nil {
		cls = c.lastCls
	}
	c.attemptEnded(n, c.frame.delay, err, cls)
	if c.aspan == nil {
		return
	}
	c.endAttempt(c.aspan, n, c.frame.delay, cls, err)
	c.aspan = nil
}

// attemptEnded tells the layer's WithOnAttempt observer, if it has one.
func (c *call[Req, Resp]) attemptEnded(n int, delay time.Duration, err error, cls policies.Classification) {
	if f := c.l.cfg.onAttempt; f != nil {
		f(c.fctx.Context, AttemptEnd{Attempt: Attempt{Layer: c.l.name, N: n, MaxAttempts: c.l.maxAttempts, Delay: delay}, Err: err, Class: cls})
	}
}

// endAttempt ends an attempt span with all its attributes in one call: its
// number, the backoff it waited, and how it failed, if it did.
func (c *call[Req, Resp]) endAttempt(span trace.Span, n int, delay time.Duration, cls policies.Classification, err error) {
	buf := c.l.attrBuf()
	defer c.l.attrs.Put(buf)
	attrs := append((*buf)[:0], telemetry.Attempt.Int(n))
	if delay > 0 {
		attrs = append(attrs, telemetry.RetryDelayMs.Int64(delay.Milliseconds()))
	}
	if err != nil {
		known := c.known()
		attrs = appendFailure(known, attrs, cls)
		span.SetStatus(codes.Error, c.status.of(known, err))
	}
	span.SetAttributes(attrs...)
	span.End()
	*buf = attrs
}
