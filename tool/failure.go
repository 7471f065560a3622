package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/failure"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Failure is the final state of a failed tool call, as the model receives it.
type Failure struct {
	Class       string  `json:"class"`                   // a policies.Class
	Retryable   bool    `json:"retryable"`               // whether calling again may succeed: false when the call cannot succeed as it is, or when retrace refuses it until RetryAfterS has passed (an open circuit)
	Message     string  `json:"message"`                 // what went wrong, secrets redacted
	RetryAfterS float64 `json:"retry_after_s,omitempty"` // when calling again may succeed, if known
	Hint        string  `json:"hint"`                    // what to do next
}

// JSON is the failure as the tool result: {"error": {…}}.
func (f *Failure) JSON() string {
	b, err := json.Marshal(struct {
		Error *Failure `json:"error"`
	}{f})
	if err != nil { // cannot happen: the fields are strings, a bool and a number
		return `{"error":{"class":"unknown","retryable":false,"message":"unencodable failure","hint":"answer with what you have"}}`
	}
	return string(b)
}

// failure turns the tool chain's final error into what the model can act on.
func (t *Tool) failure(ctx context.Context, err error) *Failure {
	cls := policies.Classify(err)
	outcome := telemetry.OutcomeFailedPermanent
	attempts := 1
	if fe, ok := errors.AsType[*policies.Error](err); ok && fe.Outcome != "" {
		outcome, attempts = fe.Outcome, fe.Attempts
		if fe.Class != "" {
			cls.Class = fe.Class
		}
	}
	f := &Failure{Class: string(cls.Class), Retryable: cls.Class.Retryable(), Message: message(ctx, err)}
	after := cls.RetryAfter
	// what names the error in the hint, "(rate_limit_exceeded)"; a type
	// that says nothing (_OTHER) is left out: the model can do nothing
	// with it.
	what := ""
	switch t := cls.Type; {
	case t == "" || t == telemetry.ErrorTypeOther:
	case redact.HasKnown(t, engine.SecretsFrom(ctx)):
		what = " (an error whose code holds a secret)" // the type is worded from the error's own code
	default:
		what = " (" + t + ")"
	}
	name := t.name
	switch {
	case outcome == telemetry.OutcomeRejected && errors.Is(err, circuitbreaker.ErrOpen):
		if rej, ok := errors.AsType[*policies.Error](failure.Underlying(err)); ok {
			after = rej.RetryAfter // the refusal's: the breaker's remaining cool-down
		}
		// A call now would be refused without reaching the tool: not
		// retryable until the circuit's cool-down has passed.
		f.Retryable = false
		f.Hint = fmt.Sprintf("%s is unavailable, circuit open for another %d s: use another tool or answer with what you have", name, seconds(after))
	case outcome == telemetry.OutcomeRejected && errors.Is(err, bulkhead.ErrFull):
		f.Hint = fmt.Sprintf("%s is busy with other calls: try again in a moment or use another tool", name)
	case outcome == telemetry.OutcomeBudgetExhausted:
		f.Retryable = false
		f.Hint = fmt.Sprintf("the task's retry budget is spent, so %s was not retried: use another tool or answer with what you have", name)
	case outcome == telemetry.OutcomeCanceled || cls.Class == policies.Canceled:
		f.Retryable = false
		f.Hint = "the call was canceled: stop"
	case cls.Class == policies.Transient:
		when := "later"
		if after > 0 {
			when = fmt.Sprintf("in %d s", seconds(after))
		}
		f.Hint = fmt.Sprintf("%s failed %s%s: try again %s, or use another tool", name, times(attempts), what, when)
	case cls.Type == "invalid_arguments":
		f.Hint = fmt.Sprintf("the arguments were not valid for %s: fix them and call it again", name)
	case cls.Class == policies.Fatal:
		f.Hint = fmt.Sprintf("%s cannot be used for the rest of this task%s: do not call it again; tell the user", name, what)
	case cls.Class == policies.UserAction:
		f.Hint = fmt.Sprintf("%s needs the user to act first%s: ask the user to do what the message says (open its link), then call %s again with the same arguments", name, what, name)
	case cls.Class == policies.ContextOverflow:
		f.Hint = fmt.Sprintf("the request to %s is too large: shorten the arguments", name)
	case cls.Class == policies.Programming:
		f.Hint = fmt.Sprintf("%s failed with a bug%s: do not call it again; report it", name, what)
	case cls.Class == policies.Permanent:
		f.Hint = fmt.Sprintf("%s cannot do this request%s: calling it again with the same arguments fails the same way; change them or use another tool", name, what)
	default:
		f.Hint = fmt.Sprintf("%s failed with an error retrace does not recognise: do not count on a retry; use another tool or answer with what you have", name)
	}
	if after > 0 && (f.Retryable || outcome == telemetry.OutcomeRejected) {
		f.RetryAfterS = math.Ceil(after.Seconds())
	}
	return f
}

// message is the innermost error's text, redacted (ctx's known secrets by
// exact value, secret patterns besides): what the downstream said, without
// retrace's layer prefixes.
func message(ctx context.Context, err error) string {
	err = failure.Underlying(err)
	s := strings.Join(strings.Fields(redact.Text(engine.ErrorText(err), engine.SecretsFrom(ctx), 0)), " ")
	if s == "" {
		return "(no message)"
	}
	return engine.Truncate(s, engine.CapToolFailure)
}

func seconds(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}
