package session_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/examples/faultserver"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
)

// A compactor or a stream callback that panics does not escape Run, and
// Run leaves the history as it was before the call.
func TestPanicsLeaveTheHistoryAsItWas(t *testing.T) {
	for name, mod := range map[string]func(*session.Config){
		"compactor": func(c *session.Config) {
			c.Compactor = func(context.Context, []session.Message) ([]session.Message, error) { panic("compactor bug") }
		},
		"OnDelta": func(c *session.Config) {
			c.OnDelta = func(session.Delta) { panic("callback bug") }
		},
	} {
		t.Run(name, func(t *testing.T) {
			script := faultserver.Always(faultserver.ContextOverflow())
			if name == "OnDelta" {
				script = faultserver.Always(faultserver.Reply("hello there"))
			}
			f := start(t, script, mod)
			f.s.Append(session.Message{Role: session.User, Content: "earlier"}, session.Message{Role: session.Assistant, Content: "ok"})
			before := f.s.History()
			var err error
			require.NotPanics(t, func() { _, err = f.s.Run(context.Background(), "a prompt") })
			require.Error(t, err)
			assert.Equal(t, policies.Programming, policies.Classify(err).Class, "a bug, never retried")
			assert.Equal(t, 1, f.srv.Requests())
			assert.Equal(t, before, f.s.History(), "the history is as it was")
		})
	}
}
