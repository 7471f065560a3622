package session

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/failure"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Candidate is one provider and model of a session's fallback chain
// ([Config.Fallbacks]). A candidate makes the whole turn, as the session's
// own provider does: through the session's retry, model timeout and
// compaction, on the history as it was when the turn began.
//
// A turn through a chain is one span of layer "fallback" (the outermost
// layer of a session used alone, which counts retrace.calls for the whole
// chain), and beneath it one span of layer "candidate" for each candidate
// it tried, named "candidate {provider}/{model}", with
// retrace.fallback.index, gen_ai.provider.name and gen_ai.request.model,
// around that candidate's session and model spans.
//
//	s, err := session.New(session.Config{
//		Provider: session.NewOpenAI(session.OpenAIConfig{APIKey: openaiKey}), Model: "gpt-4o",
//		Fallbacks: []session.Candidate{
//			{Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: other, APIKey: otherKey, Name: "azure"}), Model: "gpt-4o"},
//		},
//	})
type Candidate struct {
	Provider Provider
	Model    string
	// ModelPolicies run around each of its model calls, inside the session's
	// retry, as Config.ModelPolicies do for the session's own provider. They
	// are not inherited from Config.ModelPolicies: a circuit breaker shared
	// by two providers would open on one provider's outage and refuse the
	// other, which is up.
	ModelPolicies []failsafe.Policy[Message]
	// ProviderAttempts declares its provider's own retries that retrace does
	// not drive (an SDK's), so that the worst case counts them.
	ProviderAttempts int
}

// DefaultFallbackOn is the rule of a chain whose Config.FallbackOn is nil:
// a candidate's failure passes the turn to the next candidate when another
// model may answer what this one could not.
//
//   - Fatal (quota or billing spent): one provider's account is spent, not
//     the next one's.
//   - Transient errors until the session's attempts ran out
//     (failed_exhausted), or a circuit breaker among the candidate's model
//     policies that stays open (rejected): this provider is down or
//     overloaded for now; another may not be.
//   - A context overflow that compaction did not cure: the next model's
//     context window may be larger.
//
// Everything else stops the turn where it failed. A Permanent error is an
// error of the request itself (an invalid image), which another model
// would refuse too, or a misconfiguration (a rejected key) that must
// surface rather than be routed around. A bug (Programming), an error no
// rule recognises, the caller's end (Canceled) and a spent task budget
// (budget_exhausted: the caller's cost boundary) are not the provider's
// doing either.
//
// A context overflow is cured first where it happened: the candidate
// compacts the history with the session's Compactor and calls its model
// once more, as a session without fallbacks does. Compaction costs no
// request, keeps the turn on the model the chain puts first, and leaves a
// history that fits that model on the next turns too; a history handed on
// uncompacted would overflow the first candidate again on every later turn,
// one wasted request each. Only when compaction fails (nothing is left to
// drop) or the shorter history overflows again does the turn pass on, with
// the history as it was when the turn began, whole: a larger window may
// hold all of it.
func DefaultFallbackOn(err error) bool {
	cls := policies.Classify(err)
	switch cls.Class {
	case policies.Fatal, policies.ContextOverflow:
		return true
	case policies.Transient:
		fe, ok := errors.AsType[*policies.Error](err)
		return ok && (fe.Outcome == telemetry.OutcomeFailedExhausted || fe.Outcome == telemetry.OutcomeRejected)
	}
	return false
}

// CandidateFailure is a candidate that failed a turn, and how.
type CandidateFailure struct {
	Index    int            // its place in the chain: 0 for Config.Provider, 1 for Config.Fallbacks[0], …
	Provider string         // its gen_ai.provider.name
	Model    string         // its model
	Outcome  string         // how its session layer ended; empty when no layer said (a compactor's bug)
	Class    policies.Class // the failure's class
	Type     string         // the failure's error.type: "insufficient_quota", "503", …
	Attempts int            // the attempts its session layer made
}

// String says who failed and how: "openai/gpt-4o failed fatally:
// insufficient_quota", "azure/gpt-4o failed after 4 attempts: 503".
func (f CandidateFailure) String() string {
	var verb string
	switch {
	case f.Class == policies.ContextOverflow:
		verb = "overflowed its context"
	case f.Outcome == telemetry.OutcomeFailedFatal:
		verb = "failed fatally"
	case f.Outcome == telemetry.OutcomeFailedExhausted:
		verb = "failed after " + plural(f.Attempts, "attempt")
	case f.Outcome == telemetry.OutcomeFailedPermanent:
		verb = "failed permanently"
	case f.Outcome == telemetry.OutcomeRejected:
		verb = "was rejected"
	case f.Outcome == telemetry.OutcomeBudgetExhausted:
		verb = "ran out of retry budget"
	case f.Outcome == telemetry.OutcomeCanceled, f.Class == policies.Canceled:
		verb = "was canceled"
	case f.Outcome == telemetry.OutcomeFailedUnknown:
		verb = "failed on an error no rule recognises"
	case f.Outcome == telemetry.OutcomeFailedUserAction:
		verb = "needs the user to act first"
	case f.Class == policies.Programming:
		verb = "failed on a bug"
	default:
		verb = "failed"
	}
	return f.Provider + "/" + f.Model + " " + verb + ": " + f.Type
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// FallbackError is a turn that a fallback chain could not answer after it
// had tried more than one candidate: every candidate failed in a way that
// falls back, or a later one failed in a way that does not. (A chain that
// stops at its first candidate returns that candidate's error unchanged,
// as a session without fallbacks would.)
//
// Its class, for the layers above and for policies.Classify, is the class of
// one failure: the last candidate's when it stopped the chain; else the last
// Transient one's, since a later run of the chain may still find that
// provider up (a runtime retries it); else the last candidate's. Unwrap
// returns every candidate's error, that one first, so that errors.Is and
// errors.As see each of them.
type FallbackError struct {
	Failures []CandidateFailure // the candidates tried, in order
	errs     []error
	text     string
	span     trace.SpanContext // the fallback layer's span, when it recorded (failure.SpanOf)
}

// SpanContext is the span that recorded the chain's failure: the span of
// layer "fallback", beneath which each candidate's span tells how it
// failed; the root of the turn's trace when nothing encloses the session.
// It is the zero SpanContext when that span did not record (a no-op tracer
// provider, a span sampled out). policies.TraceOf(err) finds it from the
// error the session returns.
func (e *FallbackError) SpanContext() trace.SpanContext { return e.span }

// Error says how each candidate failed: "every candidate failed:
// openai/gpt-4o failed fatally: insufficient_quota, then anthropic/claude
// failed after 4 attempts: 529".
func (e *FallbackError) Error() string { return e.text }

// Unwrap returns the candidates' errors, the one that decides the class first.
func (e *FallbackError) Unwrap() []error { return e.errs }

// candidate is one provider and model of the session, with its layers.
type candidate struct {
	provider Provider
	model    string
	name     string                               // "{provider}/{model}", as diagnoses write it
	index    int                                  // its place in the chain, from 0
	call     middleware.Handler[Request, Message] // its model layer around the provider
	turn     middleware.Handler[*turn, Message]   // its candidate layer around its turn; nil without fallbacks
}

func (s *Session) newCandidate(i int, c Candidate, call middleware.Handler[Request, Message]) *candidate {
	k := &candidate{provider: c.Provider, model: c.Model, name: c.Provider.Name() + "/" + c.Model, index: i, call: call}
	if len(s.cfg.Fallbacks) > 0 {
		opts := append(append([]middleware.Option{}, s.cfg.Options...),
			middleware.WithSpanName(telemetry.LayerCandidate+" "+k.name),
			middleware.WithAttributes(
				telemetry.FallbackIndex.Int(i), semconv.GenAIProvider.
					String(c.Provider.Name()), semconv.GenAIRequestModel.
					String(c.Model),
			),
		)
		k.turn = middleware.Layer[*turn, Message](telemetry.LayerCandidate, middleware.Spec[Message]{}, opts...)(s.overflowing)
	}
	return k
}

// validFallbacks refuses a chain with a candidate that cannot be called.
func validFallbacks(cs []Candidate) error {
	for i, c := range cs {
		if c.Provider == nil {
			return fmt.Errorf("session: Config.Fallbacks[%d].Provider is nil", i)
		}
		if c.Model == "" {
			return fmt.Errorf("session: Config.Fallbacks[%d].Model is empty", i)
		}
	}
	return nil
}

// fallbackLayer is the layer around a turn through the chain. Each
// candidate is one of its steps, so that its worst case is the number of
// candidates times the costliest candidate it called: a candidate the turn
// did not need still counts, as if it cost what the costliest one did,
// since the next turn may need it. A fallback is not a retry: it draws
// nothing from the task budget and adds no retry depth.
func (s *Session) fallbackLayer() middleware.Handler[*turn, Message] {
	opts := append(append([]middleware.Option{}, s.cfg.Options...),
		middleware.WithSpanName(telemetry.LayerFallback),
		middleware.WithAttributes(telemetry.FallbackCandidates.Int(len(s.cands))),
		middleware.WithSteps(len(s.cands)),
	)
	return middleware.Layer[*turn, Message](telemetry.LayerFallback, middleware.Spec[Message]{}, opts...)(s.fallback)
}

// fallback is the fallback layer's handler: the candidates in order, each
// a turn of its own on the history as it was when the turn began, until one
// answers (its turn becomes t) or one fails in a way that does not fall
// back.
func (s *Session) fallback(ctx context.Context, t *turn) (Message, error) {
	start := t.history[:len(t.history):len(t.history)] // appends cannot write into it
	var (
		failed []CandidateFailure
		errs   []error
		msg    Message
		err    error
	)
	stopped := false
	for i, c := range s.cands {
		middleware.NextStep(ctx)
		ct := &turn{cand: c, history: start}
		msg, err = c.turn(ctx, ct)
		if err == nil {
			if len(failed) > 0 {
				msg.PassedOver = failed
				ct.history[len(ct.history)-1].PassedOver = failed
			}
			*t = *ct
			s.describe(ctx, i+1, c.name, failed, nil)
			return msg, nil
		}
		failed = append(failed, failureOf(i, c, err))
		errs = append(errs, err)
		if ctx.Err() != nil || !s.fallsBack(err) {
			stopped = true
			break
		}
	}
	if len(failed) > 1 {
		msg.PassedOver = failed[:len(failed)-1]
	}
	text := chainText(failed, stopped, engine.SecretsFrom(ctx))
	s.describe(ctx, len(failed), "", nil, &text)
	if len(errs) == 1 {
		return msg, err // the first candidate's failure, as a session without fallbacks returns it
	}
	if known := engine.SecretsFrom(ctx); len(known) > 0 {
		// The providers' answers retrace decoded may echo a credential:
		// errors.As on the chain's error must not find it.
		for _, e := range errs {
			if api, ok := errors.AsType[*policies.Error](e); ok {
				api.Code, api.Message = redact.Known(api.Code, known), redact.Known(api.Message, known)
			}
		}
	}
	// ctx is the fallback layer's: it makes no attempts, so no attempt span
	// stands between it and this handler.
	return msg, &FallbackError{Failures: failed, errs: decisiveFirst(errs, failed, stopped), text: text,
		span: failure.SpanOf(trace.SpanFromContext(ctx))}
}

// fallsBack asks the session's rule whether err passes the turn on.
func (s *Session) fallsBack(err error) bool {
	if s.cfg.FallbackOn != nil {
		return s.cfg.FallbackOn(err)
	}
	return DefaultFallbackOn(err)
}

// describe sets the fallback span's account of the turn: how many
// candidates it tried, who answered and after whom, or why it failed.
func (s *Session) describe(ctx context.Context, tried int, answeredBy string, failed []CandidateFailure, failure *string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{telemetry.FallbackTried.Int(tried)}
	switch {
	case failure != nil:
		attrs = append(attrs, telemetry.Diagnosis.String(*failure))
	case answeredBy != "":
		attrs = append(attrs, telemetry.FallbackAnsweredBy.String(answeredBy))
		if len(failed) > 0 {
			attrs = append(attrs, telemetry.Diagnosis.String(redact.Known("answered by "+answeredBy+" after "+joinFailures(failed), engine.SecretsFrom(ctx))))
		}
	}
	span.SetAttributes(attrs...)
}

// failureOf is how candidate i failed the turn with err.
func failureOf(i int, c *candidate, err error) CandidateFailure {
	cls := policies.Classify(err)
	f := CandidateFailure{Index: i, Provider: c.provider.Name(), Model: c.model, Class: cls.Class, Type: cls.Type}
	if fe, ok := errors.AsType[*policies.Error](err); ok && fe.Outcome != "" {
		f.Outcome, f.Attempts = fe.Outcome, fe.Attempts
	}
	if f.Type == "" {
		f.Type = telemetry.ErrorTypeOther
	}
	return f
}

// chainText words a chain's failure, its known secrets redacted: every
// candidate failed, or the last one stopped the chain.
func chainText(failed []CandidateFailure, stopped bool, known []string) string {
	text := joinFailures(failed)
	last := failed[len(failed)-1]
	switch {
	case !stopped:
		text = "every candidate failed: " + text
	case last.Class != policies.Canceled:
		text += ", not a failure that falls back"
	}
	return redact.Known(text, known)
}

func joinFailures(failed []CandidateFailure) string {
	parts := make([]string, len(failed))
	for i, f := range failed {
		parts[i] = f.String()
	}
	return strings.Join(parts, ", then ")
}

// decisiveFirst orders the candidates' errors for Unwrap: first the one
// whose class is the chain's (see FallbackError), then the others in the
// chain's order.
func decisiveFirst(errs []error, failed []CandidateFailure, stopped bool) []error {
	d := len(errs) - 1
	if !stopped {
		for i := len(failed) - 1; i >= 0; i-- {
			if failed[i].Class == policies.Transient {
				d = i
				break
			}
		}
	}
	out := make([]error, 0, len(errs))
	out = append(out, errs[d])
	for i, e := range errs {
		if i != d {
			out = append(out, e)
		}
	}
	return out
}
