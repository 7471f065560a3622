package session_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// Every candidate's answer echoes a credential of the call: the
// FallbackError holds it in none of the *APIError it unwraps to, which
// errors.As finds, nor in its text.
func TestFallbackErrorHoldsNoKnownSecret(t *testing.T) {
	const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.Status(429, "insufficient_quota", "insufficient_quota", "quota of key "+key+" spent")),
		retracetest.Always(retracetest.Status(503, "server_error", "server_error", "overloaded, key "+key)),
	}, nil)
	_, err := c.s.Run(policies.WithSecrets(context.Background(), key), "hi")
	var fe *session.FallbackError
	require.ErrorAs(t, err, &fe)
	assert.NotContains(t, err.Error(), key)
	var api *policies.Error
	require.ErrorAs(t, err, &api)
	assert.Equal(t, "overloaded, key [REDACTED]", api.Message)
	require.Len(t, fe.Unwrap(), 2)
	for _, e := range fe.Unwrap() {
		var api *policies.Error
		require.ErrorAs(t, e, &api)
		assert.NotContains(t, api.Message, key, "candidate %d", api.StatusCode)
		assert.Contains(t, api.Message, "[REDACTED]")
	}
}
