package policies_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	. "github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

var epoch = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func TestPresets(t *testing.T) {
	s := time.Second
	tests := []struct {
		name   string
		cfg    RetryConfig
		max    int
		delays []time.Duration // before retry 1, 2, …
	}{
		{"session", SessionRetry, 4, []time.Duration{2 * s, 4 * s, 8 * s}},
		{"runtime", RuntimeRetry, 3, []time.Duration{1500 * time.Millisecond, 3 * s}},
		{"tool, no jitter", RetryConfig{MaxAttempts: ToolRetry.MaxAttempts, Backoff: Backoff{Base: ToolRetry.Backoff.Base, Cap: ToolRetry.Backoff.Cap}}, 3, []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.max, tt.cfg.MaxAttempts)
			clk := clock.NewVirtual(epoch)
			tt.cfg.Clock = clk
			calls := 0
			_, err := failsafe.With(NewRetry[int](tt.cfg)).Get(func() (int, error) {
				calls++
				return 0, &Error{StatusCode: 503}
			})
			require.Error(t, err)
			assert.Equal(t, tt.max, calls)
			assert.Equal(t, tt.delays, clk.Slept())
		})
	}
	assert.True(t, RuntimeRetry.RetryUnknown, "a runtime retries whatever is not permanent")
	assert.False(t, SessionRetry.RetryUnknown, "a session retries only what it knows is transient")
}

func TestBackoffCapAndJitter(t *testing.T) {
	b := Backoff{Base: 800 * time.Millisecond, Cap: 8 * time.Second}
	assert.Equal(t, 6400*time.Millisecond, b.Delay(4, nil))
	assert.Equal(t, 8*time.Second, b.Delay(5, nil))
	assert.Equal(t, 8*time.Second, b.Delay(60, nil), "no overflow for large n")
	assert.Equal(t, time.Duration(0), Backoff{}.Delay(3, nil))

	b.Jitter = 0.5
	assert.Equal(t, 400*time.Millisecond, b.Delay(1, func() float64 { return 0 }), "jitter 0.5 halves at worst")
	assert.Equal(t, 800*time.Millisecond, b.Delay(1, func() float64 { return 0.999999999 }).Round(time.Millisecond))
	rnd := SeededRand(7)
	for range 1000 {
		d := b.Delay(2, rnd)
		assert.GreaterOrEqual(t, d, 800*time.Millisecond)
		assert.LessOrEqual(t, d, 1600*time.Millisecond)
	}
}

func TestRetryUnderFailsafeWith(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	retry := NewRetry[string](RetryConfig{MaxAttempts: 3, Backoff: Backoff{Base: time.Second}, Clock: clk})
	calls := 0
	out, err := failsafe.With(retry).Get(func() (string, error) {
		calls++
		if calls < 3 {
			return "", errors.New("connection refused")
		}
		return "ok", nil
	})
	require.NoError(t, err)
	assert.Equal(t, "ok", out)
	assert.Equal(t, 3, calls)

	calls = 0
	_, err = failsafe.With(retry).Get(func() (string, error) {
		calls++
		return "", &Error{StatusCode: 400, Code: "invalid_request_error"}
	})
	assert.Equal(t, 1, calls, "permanent: no retry")
	var fe *Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeFailedPermanent, fe.Outcome)
	assert.Regexp(t, `^failed permanently: 400 invalid_request_error \[permanent: http 400 invalid_request_error\]$`, fe.Diagnosis())

	calls = 0
	_, err = failsafe.With(retry).Get(func() (string, error) {
		calls++
		return "", errors.New("weird")
	})
	assert.Equal(t, 1, calls, "unknown errors are not retried unless RetryUnknown")
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeFailedUnknown, fe.Outcome)
	_, err = failsafe.With(NewRetry[string](RetryConfig{RetryUnknown: true, Clock: clk})).Get(func() (string, error) {
		return "", errors.New("weird")
	})
	assert.ErrorIs(t, err, retrypolicy.ErrExceeded, "an exhausted retry matches failsafe-go's ErrExceeded")
}

// A stop's diagnosis is worded once and read alike by every goroutine that
// asks for it at once, the first time as every time after.
func TestDiagnosisReadConcurrently(t *testing.T) {
	retry := NewRetry[string](RetryConfig{MaxAttempts: 1})
	_, err := failsafe.With(retry).Get(func() (string, error) {
		return "", &Error{StatusCode: 400, Code: "invalid_request_error"}
	})
	var fe *Error
	require.ErrorAs(t, err, &fe)
	const readers = 8
	got := make([]string, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() { got[i] = fe.Diagnosis() })
	}
	wg.Wait()
	want := "failed permanently: 400 invalid_request_error [permanent: http 400 invalid_request_error]"
	for i := range readers {
		assert.Equal(t, want, got[i], "reader %d", i)
	}
	assert.Equal(t, want, fe.Diagnosis())
}

func TestRetryWithBreakerUnderFailsafeWith(t *testing.T) {
	clk := clock.NewFake(epoch)
	breaker := NewCircuitBreaker[string](BreakerConfig{FailureThreshold: 2, Clock: clk})
	retry := NewRetry[string](RetryConfig{MaxAttempts: 5, Clock: clock.NewVirtual(epoch)})
	calls := 0
	_, err := failsafe.With(retry, breaker).Get(func() (string, error) {
		calls++
		return "", &Error{StatusCode: 503}
	})
	assert.Equal(t, 2, calls, "the breaker opened after 2 failures and the retry stopped at its rejection")
	var fe *Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeRejected, fe.Outcome)
	assert.ErrorIs(t, err, circuitbreaker.ErrOpen)
}

func TestTimeoutUnderFailsafeWith(t *testing.T) {
	clk := clock.NewFake(epoch)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := failsafe.With[string](NewTimeout[string](time.Minute, clk)).GetWithExecution(func(e failsafe.Execution[string]) (string, error) {
			close(started)
			<-e.Canceled()
			return "", e.Context().Err()
		})
		done <- err
	}()
	<-started
	clk.Advance(time.Minute)
	err := <-done
	assert.ErrorIs(t, err, timeout.ErrExceeded)
	assert.Equal(t, Transient, Classify(err).Class)
}

func TestBreakerCountsOnlyTransient(t *testing.T) {
	clk := clock.NewFake(epoch)
	cb := NewCircuitBreaker[string](BreakerConfig{Clock: clk})
	for range 4 {
		cb.RecordError(&Error{StatusCode: 503})
	}
	cb.RecordError(&Error{StatusCode: 400}) // the service answered: resets the count
	for range 4 {
		cb.RecordError(&Error{StatusCode: 503})
	}
	cb.RecordError(context.Canceled) // says nothing about the downstream
	cb.RecordError(errors.New("weird"))
	assert.True(t, cb.IsClosed(), "4 consecutive transient failures do not open it")
	cb.RecordError(&Error{StatusCode: 529})
	assert.True(t, cb.IsOpen())
	assert.Equal(t, 60*time.Second, cb.RemainingDelay())

	clk.Advance(60 * time.Second)
	assert.True(t, cb.TryAcquirePermit(), "one probe after the cool-down")
	assert.False(t, cb.TryAcquirePermit(), "only one")
	assert.True(t, cb.IsHalfOpen())
	cb.RecordFailure()
	assert.True(t, cb.IsOpen(), "a failed probe reopens it")
	clk.Advance(60 * time.Second)
	assert.True(t, cb.TryAcquirePermit())
	cb.RecordSuccess()
	assert.True(t, cb.IsClosed())
	assert.Equal(t, uint(0), cb.Metrics().Executions())
}

func TestStopMessages(t *testing.T) {
	err := &Error{Layer: "runtime", Outcome: telemetry.OutcomeFailedExhausted, Attempts: 3, Err: &Error{StatusCode: 503}}
	assert.Equal(t, "runtime: failed after 3 attempts: 503", err.Error())
	unknown := &Error{Outcome: telemetry.OutcomeFailedUnknown, Attempts: 1, Class: Unknown, Err: errors.New("weird")}
	assert.NotContains(t, unknown.Error(), "permanently", "nothing unknown is called permanent")
	assert.ErrorIs(t, &Error{Outcome: telemetry.OutcomeBudgetExhausted}, budget.ErrExceeded)
	assert.NotErrorIs(t, &Error{Outcome: telemetry.OutcomeFailedPermanent}, retrypolicy.ErrExceeded)
}

// A config that leaves MaxAttempts zero takes its preset field by field and
// keeps everything it set; one that sets MaxAttempts is used as it is.
func TestOrPresetKeepsWhatIsSet(t *testing.T) {
	cl := NewClassifier()
	clk := clock.NewFake(epoch)
	rnd := SeededRand(1)
	got := RetryConfig{Classifier: cl, Clock: clk, Rand: rnd, Backoff: Backoff{Cap: time.Second}}.OrPreset(ToolRetry)
	assert.Equal(t, ToolRetry.MaxAttempts, got.MaxAttempts)
	assert.Equal(t, ToolRetry.Backoff.Base, got.Backoff.Base)
	assert.Equal(t, time.Second, got.Backoff.Cap, "the cap it set")
	assert.Equal(t, ToolRetry.Backoff.Jitter, got.Backoff.Jitter)
	assert.Same(t, cl, got.Classifier)
	assert.Equal(t, clk, got.Clock)
	assert.NotNil(t, got.Rand)
	assert.True(t, RetryConfig{}.OrPreset(RuntimeRetry).RetryUnknown)

	own := RetryConfig{MaxAttempts: 2}
	assert.Equal(t, own.MaxAttempts, own.OrPreset(ToolRetry).MaxAttempts)
	assert.Zero(t, own.OrPreset(ToolRetry).Backoff.Base, "a config of its own is not mixed with the preset")
}

// A provider that echoes the key it was sent puts it in the *Error
// retrace decodes; the layer that gives up redacts the known values in each
// one in the chain, so that errors.As on its error finds none.
func TestStopRedactsKnownValuesInItsAnswers(t *testing.T) {
	const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
	ctx := WithSecrets(context.Background(), key)
	for name, fail := range map[string]func() error{
		"the last attempt's answer": func() error {
			return &Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided: " + key}
		},
		"every answer of a joined chain": func() error {
			return errors.Join(
				fmt.Errorf("first: %w", &Error{StatusCode: 403, Code: "denied_" + key, Message: "key " + key + " may not"}),
				&Error{StatusCode: 401, Message: key},
			)
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := failsafe.With[int](NewRetry[int](RetryConfig{MaxAttempts: 2})).WithContext(ctx).Get(func() (int, error) {
				return 0, fail()
			})
			var fe *Error
			require.ErrorAs(t, err, &fe)
			var api *Error
			require.ErrorAs(t, err, &api)
			assert.NotContains(t, api.Message, key)
			assert.NotContains(t, api.Code, key)
			assert.Contains(t, api.Message, "[REDACTED]")
			var all []string
			for _, e := range unwrapAll(err) {
				if a, ok := e.(*Error); ok {
					all = append(all, a.Code, a.Message)
				}
			}
			require.NotEmpty(t, all)
			for _, s := range all {
				assert.NotContains(t, s, key)
			}
			assert.NotContains(t, err.Error(), key)
		})
	}

	// Without known values the provider's words are kept as they are.
	api := &Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided: " + key}
	_, err := failsafe.With[int](NewRetry[int](RetryConfig{MaxAttempts: 1})).Get(func() (int, error) { return 0, api })
	require.Error(t, err)
	assert.Equal(t, "Incorrect API key provided: "+key, api.Message)
}

// unwrapAll is every error in err's chain, depth first.
func unwrapAll(err error) []error {
	if err == nil {
		return nil
	}
	out := []error{err}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, unwrapAll(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, unwrapAll(e)...)
		}
	}
	return out
}
