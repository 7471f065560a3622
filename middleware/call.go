package middleware

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/failsafe-go/failsafe-go/budget"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

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
	narrated  bool       // an attempt span was started: each failure is told on its attempt's span
	recording bool
	resend    int       // the request's place among an SDK's retries of it, from 0 (sdk.go); 0 for any other call
	attempts  int       // the attempts made so far
	lastEnd   time.Time // when the previous attempt ended (for a failsafe-go retry's delay)
	last      verdict   // the last error judged
	rejected  bool      // this attempt was refused by the layer's own breaker or bulkhead
	budgetOut bool      // the task budget refused a failsafe-go retry policy's retry
	report    *engine.Report
	status    statusMemo // the last span status worded
}

// verdict is the last error a call judged, and how: a failure is
// classified once, however many of the call's spans and policies read it.
type verdict struct {
	err  error
	cls  policies.Classification
	raw  policies.Classification // cls before the context's part (see judge.Judged)
	fail engine.Failure
}

// current is the span that policy state without a span of its own goes on.
func (c *call[Req, Resp]) current() trace.Span {
	if c.aspan != nil {
		return c.aspan
	}
	return c.span
}

// bound is a layer around one handler: the chain of steps built for it.
type bound[Req, Resp any] struct {
	l    *layer[Req, Resp]
	body step[Req, Resp]
}

// serve is one call through the layer: the role places it among the
// layers and starts its span, the steps run the policies and the handler,
// and the call ends with one verdict, on its span, its counts and its
// error.
func (b *bound[Req, Resp]) serve(ctx context.Context, req Req) (Resp, error) {
	l := b.l
	c := &call[Req, Resp]{l: l, req: req}
	parent := frameFrom(ctx)
	tp, mp := l.providers(parent)
	c.tracer, c.meter = l.tracerOf(tp), l.metersOf(mp)
	var start time.Time
	if c.meter.genai != nil {
		start = time.Now() // wall time, as spans are: a scaled clock would stretch the call
	}
	l.role.place(c, parent)
	c.frame.tp, c.frame.mp = tp, mp
	c.fctx = frameCtx{Context: ctx, f: &c.frame}
	ctx, c.span = l.role.start(ctx, c, parent)
	c.recording = c.span.IsRecording()
	if c.recording {
		if parent == nil {
			c.root.span = c.span
		} else {
			c.frame.announceNesting()
		}
	}

	resp, err := b.body(ctx, c, req)

	outcome, attempts, cls, err := c.verdict(ctx, err)
	if c.resend == 0 {
		// An SDK's retry of a request was in the worst case its first
		// request reported.
		c.frame.reportWorst()
	}
	if c.recording && l.genai != nil {
		l.genai.endAttributes(c.span, c.known(), resp, err)
	}
	if err != nil {
		c.frame.endedBeneath(c.beneath(err, cls)) // only a failure pays for the copy the enclosing attempt keeps
	} else {
		c.frame.endedBeneath(nil)
		if l.role.handOff(ctx, c, attempts) {
			return resp, nil // the role ends the span later
		}
	}
	if c.recording {
		l.endSpan(c, outcome, attempts, cls, err)
	}
	c.span.End()
	c.meter.record(ctx, outcome, attempts, l.retrying())
	if g := c.meter.genai; g != nil {
		l.genai.record(ctx, g, time.Since(start), resp, err, cls)
	}
	return resp, err
}

// placeFrame places the call among the layers that enclose it: a layer
// that may make frameAttempts leaf calls, which retries when it has a
// retry of its own or declares its handler's (WithInnerAttempts).
func (c *call[Req, Resp]) placeFrame(parent *frame) {
	l := c.l
	c.frame.init(parent, l.name, l.frameAttempts, l.retrying() || l.cfg.inner > 1, &c.root)
	c.frame.perAttempt = l.cfg.inner > 1
	c.frame.inner, c.frame.innerName = l.cfg.inner, l.cfg.innerName
	c.frame.announced = &l.announced
}

// verdict is how the call ended: its outcome, its attempts, the
// classification on its span, and the error it returns (the layer's
// *policies.FailedError when its retry gave up).
func (c *call[Req, Resp]) verdict(ctx context.Context, err error) (policies.Outcome, int, policies.Classification, error) {
	l := c.l
	outcome, attempts := policies.OutcomeSuccess, max(c.attempts, 1)
	var cls policies.Classification
	switch {
	case c.report != nil:
		rep := *c.report
		outcome, attempts, cls = policies.Outcome(rep.Outcome), rep.Attempts, c.last.cls
		if rep.Err != nil || rep.Cause != nil {
			err = l.judge.Fail(c.secretCtx(ctx), l.name, rep, cls)
			cls = policies.Classify(err) // the failure's own: canceled when the caller ended it
		}
	case err != nil:
		cls = c.classify(ctx, err)
		outcome = l.outcome(ctx, c, err, cls)
		if l.retrying() || c.budgetOut {
			err = l.judge.Fail(c.secretCtx(ctx), l.name, engine.Report{Attempts: c.attempts, Outcome: string(outcome), Err: err,
				Failure: c.last.fail, Cause: causeIf(ctx, outcome)}, cls)
			cls = policies.Classify(err)
		}
	case c.attempts > 1:
		outcome = policies.OutcomeSuccessAfterRetry
	}
	return outcome, attempts, cls, err
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
	case l.foreignRetry && (cls.Class == policies.Unknown || cls.Class == policies.Transient):
		return policies.OutcomeFailedExhausted // failsafe-go's retry policy retries every error
	}
	if !l.retrying() {
		// A layer that makes one attempt over a layer that gave up ends as
		// that layer did: its outcome is carried up, not guessed again from
		// the class (a session that ran out of attempts beneath an agent
		// loop exhausted them; the loop did not fail once).
		if fe, ok := errors.AsType[*policies.Error](err); ok && fe.Outcome.Failed() {
			return fe.Outcome
		}
	}
	return policies.Outcome(engine.StopOutcome(string(cls.Class)))
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
		if fe, ok := err.(*policies.Error); ok && fe.Outcome != "" {
			attrs = append(attrs, telemetry.Diagnosis.String(fe.Diagnosis()))
		} else if outcome == policies.OutcomeSuccessAfterRetry {
			attrs = append(attrs, telemetry.Diagnosis.String("succeeded on attempt "+strconv.Itoa(attempts)))
		}
	} else if fe, own := errors.AsType[*policies.Error](err); own && fe.Outcome == policies.OutcomeStepLimit {
		// A handler that ends the layer with an outcome of its own (an agent
		// loop's step limit) says why, though the layer made no attempts.
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
		if n := c.root.uncounted.Load(); n > 0 {
			attrs = append(attrs, telemetry.CallsUncounted.Int64(n))
		}
		if w := c.frame.worst(); w > 0 {
			attrs = append(attrs, telemetry.CallsWorstCase.Int64(max(w, calls)))
		}
	}
	if err != nil {
		known := c.known()
		if c.narrated {
			// The attempt spans beneath say which rule decided and what
			// Retry-After the server gave, each for its own failure; the
			// layer span says what the call ended as.
			cls.Reason, cls.RetryAfter = "", 0
		}
		attrs = appendFailure(known, attrs, cls)
		c.span.SetStatus(codes.Error, c.status.of(known, err))
	}
	c.span.SetAttributes(attrs...)
	*buf = attrs
}

// classify classifies err once per error value, as the layer's judge sees it.
// An error that says nothing of itself (no rule knows it, or it has no
// type) takes the classification of the failure beneath it: the layer call
// beneath this attempt that failed last, which read the provider's answer
// (middleware.SDK's request), so that one failure has one class on every
// span and is never guessed again from text above.
func (c *call[Req, Resp]) classify(ctx context.Context, err error) policies.Classification {
	if err != nil && sameError(err, c.last.err) {
		return c.last.cls
	}
	c.last.err = err
	by := c.classifier()
	if raw, ok := c.frame.classifiedBeneath(err, by); ok {
		// The layer beneath classified this failure with the same
		// classifier: its class is carried up, not worked out again from
		// the words the layers between wrapped it in.
		c.last.raw = raw
		c.last.cls, c.last.fail = c.l.judge.Judged(ctx, raw, err)
		return c.last.cls
	}
	c.last.raw = by.Classify(err)
	c.last.cls, c.last.fail = c.l.judge.Judged(ctx, c.last.raw, err)
	if c.last.cls.Class == policies.Unknown || c.last.cls.Type == telemetry.ErrorTypeOther {
		if b := c.frame.failedBeneath.Load(); b != nil && b.cls.Class != policies.Unknown && b.cls.Class != policies.Canceled {
			c.last.cls, c.last.raw = b.cls, b.cls // what the layers above carry too
			c.last.fail.Class, c.last.fail.RetryAfter = string(b.cls.Class), b.cls.RetryAfter
		}
	}
	return c.last.cls
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
	if sameError(err, c.last.err) {
		b.err, b.raw, b.by = err, c.last.raw, c.classifier()
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

// loopStep is the retry loop retrace drives: engine.Do runs the attempts
// through the per-attempt chain inner, with the call as its Attempter
// (steps.go).
func loopStep[Req, Resp any](retry *engine.Retry, inner step[Req, Resp]) step[Req, Resp] {
	return func(ctx context.Context, c *call[Req, Resp], _ Req) (Resp, error) {
		c.inner = inner
		resp, rep := engine.Do[Resp](ctx, retry, c.l.clock(), c)
		c.report = &rep
		return resp, rep.Err
	}
}
