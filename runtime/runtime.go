package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

// Agent is what Exec runs: a session, usually.
type Agent interface {
	Run(ctx context.Context, prompt string) (session.Message, error)
}

// AgentFunc adapts a function to Agent.
type AgentFunc func(ctx context.Context, prompt string) (session.Message, error)

// Run calls f.
func (f AgentFunc) Run(ctx context.Context, prompt string) (session.Message, error) {
	return f(ctx, prompt)
}

// Config configures a Runtime.
type Config struct {
	// Retry is Exec's own retry loop; a zero MaxAttempts means
	// policies.RuntimeRetry: 3 attempts, 1.5 s then 3 s, and whatever is not
	// known to be permanent is retried. Its Clock, if nil, is the one in
	// Options.
	Retry policies.RetryConfig
	// SingleOwner makes Exec a single attempt, so that the session alone
	// owns retrying: one owner per failure keeps the worst case at the
	// session's attempts instead of their product.
	SingleOwner bool
	// Options configure the runtime layer's tracing and clock.
	Options []middleware.Option
}

// Runtime runs agents with its exec retry loop. It is safe for concurrent use.
type Runtime struct {
	agent Agent
	exec  middleware.Handler[string, session.Message]
	max   int
}

// New returns a runtime that runs agent.
func New(agent Agent, cfg Config) *Runtime {
	cfg.Retry = cfg.Retry.OrPreset(policies.RuntimeRetry)
	if cfg.SingleOwner {
		cfg.Retry.MaxAttempts = 1
	}
	r := &Runtime{agent: agent, max: cfg.Retry.MaxAttempts}
	// Each failed attempt is recorded with the class the layer gave it, so
	// that ExecError and the attempt spans agree.
	opts := append(append([]middleware.Option{}, cfg.Options...), middleware.WithOnAttempt(record))
	r.exec = middleware.Layer[string, session.Message]("runtime", middleware.Spec[session.Message]{
		Policies: []failsafe.Policy[session.Message]{policies.NewRetry[session.Message](cfg.Retry)},
	}, opts...)(agent.Run)
	return r
}

func record(ctx context.Context, a middleware.AttemptEnd) {
	if rec, ok := ctx.Value(recorderKey{}).(*recorder); ok && a.Err != nil {
		rec.add(Attempt{N: a.N, Message: session.ErrorText(a.Err), Class: a.Class.Class, Delay: a.Delay})
	}
}

// MaxAttempts is Exec's attempt limit.
func (r *Runtime) MaxAttempts() int { return r.max }

// Exec runs the agent on prompt with the runtime's retry loop. A panic in the
// agent is recovered into a programming error with its stack, never retried.
// On failure it returns the last attempt's message and an *ExecError.
func (r *Runtime) Exec(ctx context.Context, prompt string) (session.Message, error) {
	rec := &recorder{}
	msg, err := r.exec(context.WithValue(ctx, recorderKey{}, rec), prompt)
	if err == nil {
		return msg, nil
	}
	outcome, diag := telemetry.OutcomeFailedPermanent, ""
	if fe, ok := errors.AsType[*policies.Error](err); ok && fe.Outcome != "" {
		outcome, diag = fe.Outcome, fe.Diagnosis()
	}
	return msg, &ExecError{Outcome: outcome, Attempts: rec.list(), Diagnosis: diag, Err: err}
}

type recorderKey struct{}

type recorder struct {
	mu       sync.Mutex
	attempts []Attempt
}

func (r *recorder) add(a Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, a)
}

func (r *recorder) list() []Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Attempt(nil), r.attempts...)
}

// Attempt is one failed attempt of an Exec.
type Attempt struct {
	N       int            // from 1
	Message string         // "<Type>: <message>", secrets redacted
	Class   policies.Class // what retrying could achieve
	Delay   time.Duration  // the backoff waited before it
}

// ExecError is a failed Exec: how it ended, and every attempt it made.
type ExecError struct {
	// Outcome is the runtime layer's, as its span's retrace.outcome says:
	// failed_permanent (also for a failure no layer judged), failed_fatal,
	// failed_unknown, failed_user_action, failed_exhausted, budget_exhausted,
	// rejected, canceled.
	Outcome   string
	Attempts  []Attempt
	Diagnosis string // the runtime layer's diagnosis, as on its span
	Err       error  // the runtime layer's error, wrapping the last attempt's
}

func (e *ExecError) Error() string {
	var b strings.Builder
	n := len(e.Attempts)
	if n == 0 {
		return fmt.Sprintf("exec %s before its first attempt: %s", e.ended(), e.Diagnosis)
	}
	fmt.Fprintf(&b, "exec %s after %s: ", e.ended(), plural(n))
	if n == 1 {
		b.WriteString(orType(e.Attempts[0].Message))
		return b.String()
	}
	for i, a := range e.Attempts {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "[%d] %s", a.N, orType(a.Message))
	}
	return b.String()
}

func (e *ExecError) Unwrap() error { return e.Err }

// SpanContext is the span that recorded the failed Exec: the runtime
// layer's span, the root of the exec's trace when nothing encloses the
// Exec, whose tree holds every attempt. It is the SpanContext the runtime
// layer's error names (policies.Error.SpanContext), or, when the runtime's
// span did not record, the first one beneath that did; the zero
// SpanContext when none did (a no-op tracer provider, a span sampled out).
// policies.TraceOf(err) finds it from the error Exec returns.
func (e *ExecError) SpanContext() trace.SpanContext {
	sc, _ := policies.TraceOf(e.Err)
	return sc
}

// ended words the outcome for the error's text.
func (e *ExecError) ended() string {
	switch e.Outcome {
	case telemetry.OutcomeFailedPermanent:
		return "failed permanently"
	case telemetry.OutcomeFailedExhausted:
		return "failed"
	case telemetry.OutcomeBudgetExhausted:
		return "stopped by the task's retry budget"
	case telemetry.OutcomeCanceled:
		return "canceled"
	case telemetry.OutcomeFailedFatal:
		return "failed fatally"
	case telemetry.OutcomeFailedUnknown:
		return "failed on an error no rule recognises"
	case telemetry.OutcomeFailedTransient:
		return "failed once, not retried"
	case telemetry.OutcomeFailedUserAction:
		return "stopped until the user acts"
	case telemetry.OutcomeRejected:
		return "rejected"
	}
	return string(e.Outcome)
}

func orType(msg string) string {
	if msg == "" {
		return "(empty message: the stream dropped)"
	}
	return msg
}

func plural(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
