package session

import (
	"context"
	"fmt"
	"time"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// modelLayer is candidate c's model layer (modelCallLayer), one per session
// attempt: an INTERNAL span "model", cut by the model timeout, through the
// candidate's own model policies, around its provider.
func (s *Session) modelLayer(c Candidate) middleware.Handler[Request, Message] {
	return modelCallLayer[Request](s.inference(c))(s.streamer(c.Provider))
}

// streamer is the model layer's handler for provider p: one provider call,
// timed to its first piece of answer.
func (s *Session) streamer(p Provider) middleware.Handler[Request, Message] {
	return func(ctx context.Context, req Request) (Message, error) {
		start := time.Now()
		var first time.Duration
		onDelta := func(d Delta) {
			if first == 0 {
				first = max(time.Since(start), time.Nanosecond)
			}
			if s.cfg.OnDelta != nil {
				s.cfg.OnDelta(d)
			}
		}
		msg, err := p.Stream(ctx, req, onDelta)
		if err != nil {
			return msg, err
		}
		if msg.Role != Assistant {
			// A Provider answers with an assistant message or an error: a
			// message of another role would be stored in the history and
			// refused by the next request. It is the provider's bug.
			return Message{}, &policies.Error{Class: policies.Programming, Type: "provider_contract",
				Err: fmt.Errorf("session: the provider %q answered without an error but with a message of role %q, not %q", p.Name(), msg.Role, Assistant)}
		}
		if msg.FirstChunk == 0 {
			msg.FirstChunk = first
		}
		// The answer's model and ID are the provider's words, which may
		// echo the call's credentials: the message is what the history,
		// the next request and a checkpoint carry.
		known := engine.SecretsFrom(ctx)
		msg.Model, msg.ResponseID = redact.Value(msg.Model, known), redact.Value(msg.ResponseID, known)
		return msg, nil
	}
}
