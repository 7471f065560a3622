package middleware

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/failsafe-go/failsafe-go/budget"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/failure"
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
	pend      *engine.Pending // the retry loop's steps on a shared state, waiting for the next that needs an answer; nil outside a loop
	pendLoop  engine.Pending  // what pend points to in a loop
	frame     frame
	root      root
	fctx      frameCtx
	span      trace.Span // the layer span
	aspan     trace.Span // the current attempt span, nil outside an attempt or when not recording
	narrated  bool       // an attempt span was started: each failure is told on its attempt's span
	recording bool
	rejected  bool // this attempt was refused by the layer's own breaker or bulkhead
	budgetOut bool // the task budget refused a failsafe-go retry policy's retry
	attempts  int  // the attempts made so far
	// looped is the outcome retrace's retry loop ended the call with, ""
	// when the layer has none; its report, when the loop ended on an error
	// or the context's end, is in fail.
	looped string
	fail   *failures // nil until the call judges its first error
}

// failures is what a call keeps of its errors: made when it judges its
// first, so that a call that succeeds at once carries none of it, and the
// call itself stays small.
type failures struct {
	last     verdict    // the last error judged
	status   statusMemo // the last span status worded
	report   engine.Report
	reported bool // report holds the retry loop's report of how it failed
	// lastEnd is when the last failed attempt of a failsafe-go retry policy
	// ended: the start of the delay before its retry.
	lastEnd time.Time
}

// failures returns the call's record of its errors, taken at the first
// from the records its layer's ended calls gave back (release).
func (c *call[Req, Resp]) failures() *failures {
	if c.fail == nil {
		if f, ok := c.l.reuse.fails.Get().(*failures); ok {
			c.fail = f
		} else {
			c.fail = new(failures)
		}
	}
	return c.fail
}

// release gives the call's record of its errors back to its layer, cleared
// so that it holds none of the call's errors, once the call has ended and
// nothing reads the record again: a layer's failing calls then share a few
// records instead of making one each. Only a role that ends its call when
// serve returns releases it, in a layer that drives all its policies
// (recycles); a request's body, which ends the call later, keeps its
// record.
func (c *call[Req, Resp]) release() {
	if f := c.fail; f != nil && c.l.reuse.recycles {
		c.fail = nil
		*f = failures{}
		c.l.reuse.fails.Put(f)
	}
}

// lastCls is the classification of the last error the call judged, the
// zero Classification if it judged none.
func (c *call[Req, Resp]) lastCls() policies.Classification {
	if c.fail == nil {
		return policies.Classification{}
	}
	return c.fail.last.cls
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

	v := ending[Resp]{start: start, resp: resp}
	v.outcome, v.attempts, v.cls, v.err = c.verdict(ctx, err)
	if c.recording && l.genai != nil {
		l.genai.endAttributes(c.span, c.known(), resp, v.err)
	}
	if v.err != nil {
		c.frame.endedBeneath(c.beneath(v.err, v.cls)) // only a failure pays for the copy the enclosing attempt keeps
	} else {
		c.frame.endedBeneath(nil)
	}
	l.role.end(ctx, c, v)
	return resp, v.err
}

// ending is how a call ended, once its verdict is in.
type ending[Resp any] struct {
	outcome  string
	attempts int
	cls      policies.Classification
	err      error
	resp     Resp
	start    time.Time // when the call began, for the GenAI duration; zero without GenAI metrics
}

// finish ends the call's span with its attributes and records its
// metrics: the one way every call ends, when its role ends it.
func (c *call[Req, Resp]) finish(ctx context.Context, v ending[Resp]) {
	l := c.l
	if c.recording {
		l.endSpan(c, v.outcome, v.attempts, v.cls, v.err)
	}
	c.span.End()
	c.meter.record(ctx, v.outcome, v.attempts, l.retrying())
	if g := c.meter.genai; g != nil && !v.start.IsZero() {
		l.genai.record(ctx, g, time.Since(v.start), v.resp, v.err, v.cls)
	}
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
// stop, a *policies.Error, when its retry gave up).
func (c *call[Req, Resp]) verdict(ctx context.Context, err error) (string, int, policies.Classification, error) {
	l := c.l
	outcome, attempts := telemetry.OutcomeSuccess, max(c.attempts, 1)
	var cls policies.Classification
	switch {
	case c.looped != "":
		outcome, attempts, cls = string(c.looped), c.attempts, c.lastCls()
		if f := c.fail; f != nil && f.reported {
			err = l.judge.Fail(c.secretCtx(ctx), l.name, f.report, cls, c.spanContext())
			cls = policies.Classify(err) // the failure's own: canceled when the caller ended it
		}
	case err != nil:
		cls = c.classify(ctx, err)
		outcome = l.outcome(ctx, c, err, cls)
		if l.retrying() || c.budgetOut {
			err = l.judge.Fail(c.secretCtx(ctx), l.name, engine.Report{Attempts: c.attempts, Outcome: outcome, Err: err,
				Failure: c.failures().last.fail, Cause: causeIf(ctx, outcome)}, cls, c.spanContext())
			cls = policies.Classify(err)
		} else if c.recording {
			err = l.judge.Named(err, c.spanContext())
		}
	case c.attempts > 1:
		outcome = telemetry.OutcomeSuccessAfterRetry
	}
	return outcome, attempts, cls, err
}

// spanContext is the layer span as the call's failure names it
// (policies.Error.SpanContext): its IDs when it records and is sampled,
// else the zero SpanContext. It is asked only when the call failed.
func (c *call[Req, Resp]) spanContext() trace.SpanContext {
	if !c.recording {
		return trace.SpanContext{}
	}
	return failure.SpanOf(c.span)
}

// mark names the layer span on e, an error the layer made in this call (a
// breaker's or bulkhead's refusal, an attempt's timeout, a handler's panic),
// when no stop of the layer's will wrap it: in a layer without a retry, e
// is what the caller gets. A retrying layer's stop names the span instead.
func (c *call[Req, Resp]) mark(err error) {
	if !c.recording || c.l.retrying() {
		return
	}
	if e, ok := err.(*policies.Error); ok {
		c.l.judge.Mark(e, c.spanContext())
	}
}

// outcome is how a call whose error did not come out of retrace's retry
// loop ends: a policy before the loop refused it, a failsafe-go retry policy
// gave up, or the layer does not retry.
func (l *layer[Req, Resp]) outcome(ctx context.Context, c *call[Req, Resp], err error, cls policies.Classification) string {
	if o, ok := outcomeOf(err); ok {
		return o
	}
	switch {
	case ctx.Err() != nil:
		return telemetry.OutcomeCanceled
	case c.rejected:
		return telemetry.OutcomeRejected
	case c.budgetOut, errors.Is(err, budget.ErrExceeded):
		return telemetry.OutcomeBudgetExhausted
	case l.foreignRetry && (cls.Class == policies.Unknown || cls.Class == policies.Transient):
		return telemetry.OutcomeFailedExhausted // failsafe-go's retry policy retries every error
	}
	if !l.retrying() {
		// A layer that makes one attempt over a layer that gave up ends as
		// that layer did: its outcome is carried up, not guessed again from
		// the class (a session that ran out of attempts beneath an agent
		// loop exhausted them; the loop did not fail once).
		if fe, ok := errors.AsType[*policies.Error](err); ok && fe.Outcome != "" { // an error carries an outcome only once a layer stopped on it: a failure
			return fe.Outcome
		}
	}
	return string(engine.StopOutcome(string(cls.Class)))
}

func causeIf(ctx context.Context, o string) error {
	if o == telemetry.OutcomeCanceled {
		return context.Cause(ctx)
	}
	return nil
}

// endSpan sets the layer span's attributes, all in one call: how the call
// ended, and for a retrying layer its limit, attempts and diagnosis, and on
// the outermost layer the counts. A call that succeeded at its first
// attempt, as most do, sets the layer's attributes made for it beforehand
// (okAttrs), the same endAttrs would make.
func (l *layer[Req, Resp]) endSpan(c *call[Req, Resp], outcome string, attempts int, cls policies.Classification, err error) {
	root := c.frame.parent == nil
	var n spanCounts
	if root {
		n = spanCounts{calls: c.root.calls.Load(), untraced: c.root.untraced.Load(), uncounted: c.root.uncounted.Load(), worst: c.frame.worst()}
	}
	b := policies.TaskBudgetFrom(c.fctx.Context)
	budgeted := b != nil
	if err == nil && !budgeted {
		if ok := l.reuse.ok.of(c.frame.depth, outcome, attempts, root, n); ok != nil {
			c.span.SetAttributes(ok...)
			return
		}
	}
	buf := l.attrBuf()
	defer l.reuse.attrs.Put(buf)
	left := -1
	if budgeted {
		left = b.Remaining()
	}
	attrs := l.endAttrs((*buf)[:0], c.frame.depth, outcome, attempts, err, left, root, n)
	if err != nil {
		known := c.known()
		if c.narrated {
			// The attempt spans beneath say which rule decided and what
			// Retry-After the server gave, each for its own failure; the
			// layer span says what the call ended as.
			cls.Reason, cls.RetryAfter = "", 0
		}
		attrs = appendFailure(known, attrs, cls)
		c.span.SetStatus(codes.Error, c.statusOf(known, err))
	}
	c.span.SetAttributes(attrs...)
	*buf = attrs
}

// spanCounts are the counts of the outermost layer span: its leaf calls,
// those not traced and those not counted, and its worst case (-1 unknown).
type spanCounts struct{ calls, untraced, uncounted, worst int64 }

// endAttrs appends to attrs what a layer span says of how its call ended,
// its failure aside: the layer, its depth (when not 0) and outcome; for a
// retrying layer its limit (unless the worst case states it), attempts and
// diagnosis; the task budget left (left ≥ 0: the call ran under one); and on
// the outermost layer (root) the counts n.
func (l *layer[Req, Resp]) endAttrs(attrs []attribute.KeyValue, depth int, outcome string, attempts int, err error, left int, root bool, n spanCounts) []attribute.KeyValue {
	attrs = append(attrs, telemetry.Layer.String(l.name))
	if depth > 0 {
		// A depth of 0 is the key's documented default (no retrying layer
		// encloses this one): it is left out, and an absent depth reads 0.
		attrs = append(attrs, telemetry.RetryDepth.Int(depth))
	}
	attrs = append(attrs, telemetry.Outcome.String(outcome))
	worst := int64(-1) // retrace.calls.worst_case, when the span carries it
	if root && n.worst > 0 {
		worst = max(n.worst, n.calls)
	}
	if l.retrying() {
		// On the outermost layer span a limit equal to the worst case is
		// left out: it restates retrace.calls.worst_case (each attempt made
		// one call, so the limit is the worst case), and an absent limit
		// reads the worst case.
		if l.maxAttempts > 0 && int64(l.maxAttempts) != worst {
			attrs = append(attrs, telemetry.MaxAttempts.Int(l.maxAttempts))
		}
		attrs = append(attrs, telemetry.Attempts.Int(attempts))
		if fe, ok := err.(*policies.Error); ok && fe.Outcome != "" {
			attrs = append(attrs, telemetry.Diagnosis.String(fe.Diagnosis()))
		} else if outcome == telemetry.OutcomeSuccessAfterRetry {
			attrs = append(attrs, telemetry.Diagnosis.String("succeeded on attempt "+strconv.Itoa(attempts)))
		}
	} else if fe, own := errors.AsType[*policies.Error](err); own && fe.Outcome == telemetry.OutcomeStepLimit {
		// A handler that ends the layer with an outcome of its own (an agent
		// loop's step limit) says why, though the layer made no attempts.
		attrs = append(attrs, telemetry.Diagnosis.String(fe.Diagnosis()))
	}
	if left >= 0 {
		attrs = append(attrs, telemetry.BudgetLeft.Int(left))
	}
	if root {
		attrs = append(attrs, telemetry.Calls.Int64(n.calls))
		if n.untraced > 0 {
			attrs = append(attrs, telemetry.CallsUntraced.Int64(n.untraced))
		}
		if n.uncounted > 0 {
			attrs = append(attrs, telemetry.CallsUncounted.Int64(n.uncounted))
		}
		if worst > 0 {
			attrs = append(attrs, telemetry.CallsWorstCase.Int64(worst))
		}
	}
	return attrs
}

// okAttrs are the attributes of a layer's spans when a call succeeds at
// its first attempt, as most calls do, made once with the layer by the
// functions that make them for any call (endAttrs, endAttempt's), so that
// such a call builds none: the span copies what it is given.
type okAttrs struct {
	// root is the outermost layer span's, when the call made one leaf call
	// and its worst case is rootWorst (the layer's own: it called no layer).
	root      []attribute.KeyValue
	rootWorst int64
	nested    [4][]attribute.KeyValue // a layer span's beneath another, by its retrace.retry.depth
	attempts  [][]attribute.KeyValue  // an attempt span's, by its number from 1, when it waited no backoff and succeeded
}

// okAttempts is how many attempt numbers okAttrs holds at most.
const okAttempts = 16

func (l *layer[Req, Resp]) makeOK() {
	o := &l.reuse.ok
	o.rootWorst = -1 // frame.worst's unknown
	if l.frameAttempts > 0 {
		o.rootWorst = int64(l.frameAttempts)
	}
	o.root = slices.Clip(l.endAttrs(nil, 0, telemetry.OutcomeSuccess, 1, nil, -1, true, spanCounts{calls: 1, worst: o.rootWorst}))
	for d := range o.nested {
		o.nested[d] = slices.Clip(l.endAttrs(nil, d, telemetry.OutcomeSuccess, 1, nil, -1, false, spanCounts{}))
	}
	if l.retry != nil {
		for n := 1; n <= min(l.maxAttempts, okAttempts); n++ {
			o.attempts = append(o.attempts, attemptAttrs(nil, n, 0))
		}
	}
}

// of returns the layer span's attributes made beforehand for a call that
// ended so, nil if none were.
func (o *okAttrs) of(depth int, outcome string, attempts int, root bool, n spanCounts) []attribute.KeyValue {
	switch {
	case outcome != telemetry.OutcomeSuccess || attempts != 1:
		return nil
	case root:
		if n != (spanCounts{calls: 1, worst: o.rootWorst}) {
			return nil
		}
		return o.root
	case depth < len(o.nested):
		return o.nested[depth]
	}
	return nil
}

// classify classifies err once per error value, as the layer's judge sees it.
// An error that says nothing of itself (no rule knows it, or it has no
// type) takes the classification of the failure beneath it: the layer call
// beneath this attempt that failed last, which read the provider's answer
// (middleware.SDK's request), so that one failure has one class on every
// span and is never guessed again from text above.
func (c *call[Req, Resp]) classify(ctx context.Context, err error) policies.Classification {
	last := &c.failures().last
	if err != nil && sameError(err, last.err) {
		return last.cls
	}
	last.err = err
	by := c.classifier()
	if raw, ok := c.frame.classifiedBeneath(err, by); ok {
		// The layer beneath classified this failure with the same
		// classifier: its class is carried up, not worked out again from
		// the words the layers between wrapped it in.
		last.raw = raw
		last.cls, last.fail = c.l.judge.Judged(ctx, raw, err)
		return last.cls
	}
	last.raw = by.Classify(err)
	last.cls, last.fail = c.l.judge.Judged(ctx, last.raw, err)
	if last.cls.Class == policies.Unknown || last.cls.Type == telemetry.ErrorTypeOther {
		if b := c.frame.failedBeneath.Load(); b != nil && b.cls.Class != policies.Unknown && b.cls.Class != policies.Canceled {
			last.cls, last.raw = b.cls, b.cls // what the layers above carry too
			last.fail.Class, last.fail.RetryAfter = string(b.cls.Class), b.cls.RetryAfter
		}
	}
	return last.cls
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
	if c.frame.parent == nil {
		return nil // no layer encloses the call: none reads it
	}
	b := &beneath{cls: cls}
	if f := c.fail; f != nil && sameError(err, f.last.err) {
		b.err, b.raw, b.by = err, f.last.raw, c.classifier()
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
		c.looped, c.attempts = rep.Outcome, rep.Attempts
		if rep.Err != nil || rep.Cause != nil {
			// Only a failure keeps the report (a success is its outcome and
			// attempts), in the call's record of its errors, not apart.
			f := c.failures()
			f.report, f.reported = rep, true
		}
		return resp, rep.Err
	}
}
