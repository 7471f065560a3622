package session

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Config configures a Session. Provider and Model are required.
type Config struct {
	Provider Provider
	Model    string
	System   string // the system prompt, kept through compaction
	Tools    []Tool
	// Retry is the session's automatic retry; a zero MaxAttempts means
	// policies.SessionRetry (4 attempts, 2 s, 4 s, 8 s, unknown errors not
	// retried). Its Clock, if nil, is the one in Options.
	Retry policies.RetryConfig
	// ModelTimeout bounds each model call, so that a provider that never
	// answers is cut and retried; 0 → 2 minutes.
	ModelTimeout time.Duration
	// ModelPolicies run around each model call, inside the session's retry
	// (a circuit breaker for the provider, say).
	ModelPolicies []failsafe.Policy[Message]
	// ProviderAttempts declares the provider's own retries that retrace does
	// not drive (an SDK's), so that the worst case counts them.
	ProviderAttempts int
	// Compactor shortens the history after a context overflow; nil →
	// DropOldest.
	Compactor Compactor
	// OnDelta, if set, receives the streaming text of each model call.
	OnDelta func(Delta)
	// Options configure both layers' tracing and clock.
	Options []middleware.Option
}

// Compactor shortens a history that overflowed the model's context. It
// returns the shorter history, or an error when it cannot shorten it.
type Compactor func(ctx context.Context, history []Message) ([]Message, error)

// ErrCannotCompact is DropOldest's answer to a history with nothing left to drop.
var ErrCannotCompact = errors.New("session: cannot compact: nothing but the system prompt and the last user message is left")

// DropOldest drops the oldest half of the history's messages, rounded up
// to a whole turn (a turn is a user message and everything after it up to the
// next), keeping the system prompt and everything from the last user message
// on. It never keeps an answer or a tool result whose question it dropped.
func DropOldest(_ context.Context, history []Message) ([]Message, error) {
	lastUser := -1
	for i, m := range history {
		if m.Role == User {
			lastUser = i
		}
	}
	var system, middle []Message
	for i, m := range history {
		switch {
		case m.Role == System:
			system = append(system, m)
		case lastUser < 0 || i < lastUser:
			middle = append(middle, m)
		}
	}
	if len(middle) == 0 {
		return nil, ErrCannotCompact
	}
	cut := (len(middle) + 1) / 2
	for cut < len(middle) && middle[cut].Role != User {
		// A turn starts at its user message: the answers and tool results
		// after it stay with it, or go with it, never without it.
		cut++
	}
	out := append(append([]Message(nil), system...), middle[cut:]...)
	if lastUser >= 0 {
		out = append(out, history[lastUser:]...)
	}
	return out, nil
}

// Session is a conversation with a model. Its methods are safe for
// concurrent use; turns run one at a time.
type Session struct {
	cfg   Config
	run   middleware.Handler[struct{}, Message] // the session layer around one turn
	model middleware.Handler[Request, Message]  // the model layer around the provider

	secrets []string // the provider's credentials, redacted by exact value

	mu      sync.Mutex
	history []Message
}

// New returns a session.
func New(cfg Config) (*Session, error) {
	if cfg.Provider == nil {
		return nil, errors.New("session: Config.Provider is nil")
	}
	if cfg.Model == "" {
		return nil, errors.New("session: Config.Model is empty")
	}
	cfg.Retry = cfg.Retry.OrPreset(policies.SessionRetry)
	if cfg.ModelTimeout <= 0 {
		cfg.ModelTimeout = 2 * time.Minute
	}
	if cfg.Compactor == nil {
		cfg.Compactor = DropOldest
	}
	s := &Session{cfg: cfg}
	if h, ok := cfg.Provider.(SecretHolder); ok {
		s.secrets = h.Secrets()
	}
	modelOpts := append(append([]middleware.Option{}, cfg.Options...),
		middleware.WithSpanName("chat "+cfg.Model),
		middleware.WithSpanKind(trace.SpanKindClient),
		middleware.WithAttributes(
			telemetry.GenAIOperation.String("chat"),
			telemetry.GenAIProvider.String(cfg.Provider.Name()),
			telemetry.GenAIRequestModel.String(cfg.Model),
		),
		middleware.WithInnerAttempts(cfg.ProviderAttempts),
	)
	modelPolicies := append([]failsafe.Policy[Message]{policies.NewTimeout[Message](cfg.ModelTimeout, nil)}, cfg.ModelPolicies...)
	s.model = middleware.PoliciesWith[Request, Message]("model", modelOpts, modelPolicies...)(s.stream)
	s.run = middleware.PoliciesWith[struct{}, Message]("session", cfg.Options, policies.NewRetry[Message](cfg.Retry))(s.attempt)
	return s, nil
}

// History returns a copy of the conversation so far.
func (s *Session) History() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.history...)
}

// Append adds messages, such as tool results, to the history.
func (s *Session) Append(msgs ...Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history = append(s.history, msgs...)
}

// Run adds the user's prompt and makes the assistant's turn. On failure it
// returns the turn's error message (StopReason "error") and the error, and
// leaves the history as it was before the call, so that a caller's retry
// starts clean.
func (s *Session) Run(ctx context.Context, prompt string) (Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	saved := s.history[:len(s.history):len(s.history)] // appends cannot write into it
	s.history = append(saved, Message{Role: User, Content: prompt})
	msg, err := s.turn(engine.WithSecrets(ctx, s.secrets...))
	if err != nil {
		s.history = saved
	}
	return msg, err
}

// Continue makes the assistant's next turn on the history as it is (after
// tool results, say). On failure the history is left as it was.
func (s *Session) Continue(ctx context.Context) (Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	saved := s.history[:len(s.history):len(s.history)]
	msg, err := s.turn(engine.WithSecrets(ctx, s.secrets...))
	if err != nil {
		s.history = saved
	}
	return msg, err
}

// turn runs the session layer; after a context overflow it compacts the
// history and runs it once more. That run is not a transient retry: it is a
// second call of the session layer, with its own span.
func (s *Session) turn(ctx context.Context) (Message, error) {
	msg, err := s.run(ctx, struct{}{})
	var fe *policies.FailedError
	if err == nil || !errors.As(err, &fe) || fe.Class != policies.ContextOverflow {
		return msg, err
	}
	s.popFailed()
	compacted, cerr := compact(ctx, s.cfg.Compactor, append([]Message(nil), s.history...)) // its own copy to shorten
	if _, bug := cerr.(*policies.PanicError); bug {
		// The compactor's bug decides what the turn's failure is: first in
		// the chain, it is what the classifier reads.
		return msg, fmt.Errorf("compaction failed: %w (the turn had overflowed: %w)", cerr, err)
	}
	if cerr != nil {
		return msg, fmt.Errorf("%w (compaction failed: %w)", err, cerr)
	}
	trace.SpanFromContext(ctx).AddEvent(telemetry.EventCompacted, trace.WithAttributes(
		telemetry.CompactionBefore.Int(len(s.history)),
		telemetry.CompactionAfter.Int(len(compacted)),
	))
	s.history = compacted
	return s.run(ctx, struct{}{})
}

// compact runs the user's compactor. A compactor that panics is a bug in
// it, not in the turn: the panic becomes a Programming error, so that Run
// still restores the history and returns.
func compact(ctx context.Context, c Compactor, history []Message) (out []Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, &policies.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return c(ctx, history)
}

// attempt is one try of the turn, inside the session layer's retry.
func (s *Session) attempt(ctx context.Context, _ struct{}) (Message, error) {
	s.popFailed() // the failed message must not reach the next request
	req := Request{Model: s.cfg.Model, Messages: s.request(), Tools: s.cfg.Tools}
	msg, err := s.model(ctx, req)
	if err != nil {
		msg = Message{Role: Assistant, StopReason: StopError, ErrorMessage: errorText(err, engine.SecretsFrom(ctx))}
		s.history = append(s.history, msg)
		return msg, &TurnError{Message: msg, Err: err}
	}
	s.history = append(s.history, msg)
	return msg, nil
}

// popFailed removes a trailing failed assistant message.
func (s *Session) popFailed() {
	if n := len(s.history); n > 0 && s.history[n-1].Role == Assistant && s.history[n-1].StopReason == StopError {
		s.history = s.history[: n-1 : n-1]
	}
}

// request is the history as the provider sees it: the system prompt first.
func (s *Session) request() []Message {
	msgs := make([]Message, 0, len(s.history)+1)
	if s.cfg.System != "" && (len(s.history) == 0 || s.history[0].Role != System) {
		msgs = append(msgs, Message{Role: System, Content: s.cfg.System})
	}
	return append(msgs, s.history...)
}

// stream is the model layer's handler: one provider call.
func (s *Session) stream(ctx context.Context, req Request) (Message, error) {
	msg, err := s.cfg.Provider.Stream(ctx, req, s.cfg.OnDelta)
	if err != nil {
		return msg, err
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(
			telemetry.GenAIInputTokens.Int(msg.Usage.InputTokens),
			telemetry.GenAIOutputTokens.Int(msg.Usage.OutputTokens),
			telemetry.GenAIFinishReasons.StringSlice([]string{msg.StopReason}),
		)
	}
	return msg, nil
}
