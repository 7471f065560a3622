package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

// depth counts the errors in err's chain, err included.
func depth(err error) int {
	n := 0
	for ; err != nil; err = errors.Unwrap(err) {
		n++
	}
	return n
}

// A rejected key through runtime.Exec → session → the real OpenAI client
// is at most 4 errors deep and says "permanently" once.
func TestRejectedKeyReadsOnce(t *testing.T) {
	srv := retracetest.New(retracetest.Always(retracetest.InvalidAPIKey()))
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	opts := []middleware.Option{middleware.WithClock(clock.NewVirtual(epoch))}
	s, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test-0123456789abcdefghij"}),
		Model:    "gpt-test", Options: opts,
	})
	require.NoError(t, err)
	_, err = runtime.New(s, runtime.Config{Options: opts}).Exec(context.Background(), "hi")

	require.Error(t, err)
	assert.Equal(t, 1, srv.Requests())
	assert.LessOrEqual(t, depth(err), 4, "ExecError → the session's stop → the model's stop → the answer")
	assert.Equal(t, 1, strings.Count(err.Error(), "permanently"), err.Error())
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, telemetry.OutcomeFailedPermanent, ee.Outcome)
	assert.Equal(t, 1, strings.Count(ee.Diagnosis, "permanently"), ee.Diagnosis)
	// One errors.As reads the whole failure: which layer stopped, why,
	// after how many attempts, and what the provider answered.
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "session", fe.Layer, "the session's failure, passed up unchanged")
	assert.Equal(t, telemetry.OutcomeFailedPermanent, fe.Outcome)
	assert.Equal(t, 1, fe.Attempts)
	assert.Equal(t, policies.Permanent, fe.Class)
	assert.Equal(t, "invalid_api_key", fe.Type)
	assert.Equal(t, "http 401 invalid_api_key", fe.Reason)
	assert.Equal(t, 401, fe.StatusCode)
	assert.Equal(t, "invalid_api_key", fe.Code)
	assert.Contains(t, fe.Message, "Incorrect API key provided")
	assert.NotContains(t, fe.Message, "sk-test-0123456789abcdefghij")
	assert.NotContains(t, err.Error(), "sk-test-0123456789abcdefghij")
}

// An error no rule recognises that the session does not retry ends
// failed_unknown, never "permanently"; the runtime retries it.
func TestUnknownErrorIsNotPermanent(t *testing.T) {
	weird := errors.New("the tool server said something odd")
	a, calls := agent(weird, weird, weird)
	_, err := newRuntime(a, clock.NewVirtual(epoch), false).Exec(context.Background(), "go")
	require.Error(t, err)
	assert.Equal(t, 3, *calls, "a runtime retries what it does not know")
	assert.NotContains(t, err.Error(), "permanently")
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, ee.Outcome)
	assert.Equal(t, policies.Unknown, ee.Attempts[0].Class)
}

// A failure keeps the class its layer recorded, however it is wrapped: a
// cancellation right after a failed attempt is canceled, not the attempt's
// own explicit class beneath it.
func TestWrappedFailureKeepsItsClass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	rt := runtime.New(runtime.AgentFunc(func(context.Context, string) (session.Message, error) {
		cancel()
		return session.Message{}, &policies.Error{Class: policies.Transient, Type: "malformed_response", Err: errors.New("malformed response")}
	}), runtime.Config{})
	_, err := rt.Exec(ctx, "x")
	require.ErrorIs(t, err, context.Canceled)
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, telemetry.OutcomeCanceled, ee.Outcome)
	assert.Equal(t, policies.Canceled, policies.Classify(err).Class)
	assert.Equal(t, policies.Canceled, policies.Classify(fmt.Errorf("w: %w", err)).Class)
}
