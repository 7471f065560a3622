package session_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

// A chain whose every candidate failed names the fallback layer's span,
// the root of the turn, beneath which each candidate's span says how it
// failed; each candidate's own stop, which errors.As reaches, names its
// session span in the same trace.
func TestFallbackErrorNamesTheChainSpan(t *testing.T) {
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.InsufficientQuota()),
		retracetest.Always(retracetest.ServerError(503)),
	}, nil)
	_, err := c.s.Run(context.Background(), "hi")
	var fe *session.FallbackError
	require.ErrorAs(t, err, &fe)
	root := c.root(t)
	assert.Equal(t, telemetry.LayerFallback, v(root, telemetry.Layer))

	sc := fe.SpanContext()
	require.True(t, sc.IsValid())
	assert.Equal(t, root.SpanContext().TraceID(), sc.TraceID())
	assert.Equal(t, root.SpanContext().SpanID(), sc.SpanID())
	got, ok := policies.TraceOf(err)
	require.True(t, ok)
	assert.Equal(t, sc, got)

	var stop *policies.Error
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "session", stop.Layer)
	assert.Equal(t, sc.TraceID(), stop.SpanContext().TraceID(), "the decisive candidate's stop, in the same trace")
	var sessionSpans []string
	for _, s := range c.layer("session") {
		sessionSpans = append(sessionSpans, s.SpanContext().SpanID().String())
	}
	assert.Contains(t, sessionSpans, stop.SpanContext().SpanID().String())
}
