package session

import (
	"context"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/middleware"
)

// turn is one assistant turn in progress, what flows through the session's
// layers: the candidate it runs on and the history it runs on, which its
// attempts extend (a failed attempt's message, replaced by the next one's;
// the answer). The session's history is replaced by the turn's when the
// turn succeeds, and left as it was when it fails.
type turn struct {
	cand    *candidate
	history []Message
}

// sessionLayer is candidate c's session layer, its logical model call
// ([InferenceLayer]): a CLIENT span "chat {model}" with the GenAI attributes
// from its start, covering the session's retries, and ending with the
// usage, response model, response ID and finish reasons of the attempt that
// ended it (["error"] when it failed), as the GenAI conventions define an
// inference span under automatic retries. Its attempts, and the model layer
// within each, are INTERNAL; the physical requests beneath are the HTTP
// CLIENT spans.
func (s *Session) sessionLayer(c Candidate) middleware.Handler[*turn, Message] {
	return inferenceLayer[*turn](s.inference(c))(s.attempt)
}

// attempt is one try of the turn on its candidate, inside the session
// layer's retry. The message it makes names the provider and model that
// made it.
func (s *Session) attempt(ctx context.Context, t *turn) (Message, error) {
	t.popFailed() // the failed message must not reach the next request
	c := t.cand
	req := Request{Model: c.model, Messages: s.request(t.history), Tools: s.cfg.Tools}
	msg, err := c.call(ctx, req)
	if err != nil {
		msg = Message{Role: Assistant, StopReason: StopError, ErrorMessage: errorText(err, engine.SecretsFrom(ctx)),
			Provider: c.provider.Name(), Model: c.model}
		t.history = append(t.history, msg)
		return msg, err
	}
	if msg.Provider == "" {
		msg.Provider = c.provider.Name()
	}
	if msg.Model == "" {
		msg.Model = c.model
	}
	t.history = append(t.history, msg)
	return msg, nil
}

// popFailed removes a trailing failed assistant message.
func (t *turn) popFailed() {
	if n := len(t.history); n > 0 && t.history[n-1].Role == Assistant && t.history[n-1].StopReason == StopError {
		t.history = t.history[: n-1 : n-1]
	}
}

// request is history as the provider sees it: the system prompt first.
func (s *Session) request(history []Message) []Message {
	msgs := make([]Message, 0, len(history)+1)
	if s.cfg.System != "" && (len(history) == 0 || history[0].Role != System) {
		msgs = append(msgs, Message{Role: System, Content: s.cfg.System})
	}
	return append(msgs, history...)
}
