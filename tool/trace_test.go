package tool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

// A tool whose retries ran out returns a stop that names the tool layer's
// span ("execute_tool {name}"), beneath which are its three attempts.
func TestExhaustedToolNamesItsSpan(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	d := &docs{clk: clk, until: epoch.Add(time.Hour)}
	search := tool.New("search_docs", d.search, tool.Config{Clock: clk, Options: []middleware.Option{tp}})
	_, err := search.Call(context.Background(), `{"query":"x"}`)
	require.Error(t, err)
	assert.Equal(t, int64(3), d.calls.Load())

	var fe *policies.Error
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, telemetry.OutcomeFailedExhausted, fe.Outcome)
	var layer string
	for _, s := range rec.Ended() {
		if s.Parent().IsValid() {
			continue
		}
		layer = s.Name()
		assert.Equal(t, s.SpanContext().TraceID(), fe.SpanContext().TraceID())
		assert.Equal(t, s.SpanContext().SpanID(), fe.SpanContext().SpanID())
	}
	assert.Equal(t, "execute_tool search_docs", layer)
	sc, ok := policies.TraceOf(err)
	require.True(t, ok)
	assert.Equal(t, fe.SpanContext(), sc)
}
