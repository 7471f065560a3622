package session

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"
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
	// Fallbacks are the models tried, in order, when Provider and Model
	// fail a turn in a way another model may not (see [DefaultFallbackOn]):
	// a chain whose first candidate is Provider and Model. Each candidate
	// runs the whole turn, with the session's Retry, ModelTimeout and
	// Compactor, on the history as it was when the turn began.
	Fallbacks []Candidate
	// FallbackOn decides whether a candidate's failure passes the turn to
	// the next candidate; nil → DefaultFallbackOn. It is never asked once
	// the caller's context has ended.
	FallbackOn func(err error) bool
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
// concurrent use, and turns run one at a time: a turn holds the session
// from its first attempt to its last, through the backoff waits between
// them (a history must not change under a turn that is retrying it), so a
// second Run or Continue, and History and Append too, wait until the turn
// in progress ends, for as long as its retries take. Conversations that
// must not wait for each other are separate sessions.
type Session struct {
	cfg   Config
	runs  []middleware.Handler[int, Message]    // each candidate's session layer around one turn
	cands []*candidate                          // Provider and Model first, then the fallbacks
	chain middleware.Handler[struct{}, Message] // the fallback layer around the candidates; nil without fallbacks

	secrets []string // the providers' credentials, redacted by exact value

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
		cfg.ModelTimeout = DefaultModelTimeout
	}
	if cfg.Compactor == nil {
		cfg.Compactor = DropOldest
	}
	if err := validFallbacks(cfg.Fallbacks); err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg}
	chain := append([]Candidate{{Provider: cfg.Provider, Model: cfg.Model, ModelPolicies: cfg.ModelPolicies, ProviderAttempts: cfg.ProviderAttempts}}, cfg.Fallbacks...)
	for i, c := range chain {
		if h, ok := c.Provider.(SecretHolder); ok {
			s.secrets = append(s.secrets, h.Secrets()...)
		}
		s.cands = append(s.cands, s.newCandidate(i, c, s.modelLayer(c)))
	}
	for _, c := range chain {
		s.runs = append(s.runs, s.sessionLayer(c))
	}
	if len(chain) > 1 {
		s.chain = s.fallbackLayer()
	}
	return s, nil
}

// sessionLayer is candidate c's session layer, its logical model call
// ([InferenceLayer]): a CLIENT span "chat {model}" with the GenAI attributes
// from its start, covering the session's retries, and ending with the
// usage, response model, response ID and finish reasons of the attempt that
// ended it (["error"] when it failed), as the GenAI conventions define an
// inference span under automatic retries. Its attempts, and the model layer
// within each, are INTERNAL; the physical requests beneath are the HTTP
// CLIENT spans.
func (s *Session) sessionLayer(c Candidate) middleware.Handler[int, Message] {
	return InferenceLayer[int](s.inference(c))(s.attempt)
}

// inference is candidate c's logical model call, with the session's
// settings.
func (s *Session) inference(c Candidate) Inference[Message] {
	in := Inference[Message]{
		Provider: c.Provider.Name(), Model: c.Model, Stream: true,
		Retry: s.cfg.Retry, Timeout: s.cfg.ModelTimeout, Policies: c.ModelPolicies,
		InnerAttempts: c.ProviderAttempts, Options: s.cfg.Options,
		Describe: func(m Message) Message { return m },
	}
	if sv, ok := c.Provider.(interface{ Server() (string, int) }); ok {
		in.Server, in.Port = sv.Server()
	}
	return in
}

// inferenceEnd is what the inference span learns when the call ends.
func inferenceEnd(m Message, err error) []attribute.KeyValue {
	if err != nil {
		return []attribute.KeyValue{telemetry.GenAIFinishReasons.StringSlice([]string{StopError})}
	}
	kv := []attribute.KeyValue{
		telemetry.GenAIInputTokens.Int(m.Usage.InputTokens),
		telemetry.GenAIOutputTokens.Int(m.Usage.OutputTokens),
		telemetry.GenAIFinishReasons.StringSlice([]string{m.StopReason}),
	}
	if m.Model != "" {
		kv = append(kv, telemetry.GenAIResponseModel.String(m.Model))
	}
	if m.ResponseID != "" {
		kv = append(kv, telemetry.GenAIResponseID.String(m.ResponseID))
	}
	if m.FirstChunk > 0 {
		kv = append(kv, telemetry.GenAITimeToFirstChunk.Float64(m.FirstChunk.Seconds()))
	}
	return kv
}

// modelLayer is candidate c's model layer ([ModelLayer]), one per session
// attempt: an INTERNAL span "model", cut by the model timeout, through the
// candidate's own model policies, around its provider.
func (s *Session) modelLayer(c Candidate) middleware.Handler[Request, Message] {
	return ModelLayer[Request](s.inference(c))(s.streamer(c.Provider))
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
// starts clean. It waits for a turn of this session in progress to end.
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

// turn makes the assistant's turn: through the fallback chain when the
// session has one, else on its own provider.
func (s *Session) turn(ctx context.Context) (Message, error) {
	if s.chain != nil {
		return s.chain(ctx, struct{}{})
	}
	return s.turnOn(ctx, 0)
}

// turnOn runs the session layer on candidate i; after a context overflow it
// compacts the history and runs it once more. That run is not a transient
// retry: it is a second call of the session layer, with its own span.
func (s *Session) turnOn(ctx context.Context, i int) (Message, error) {
	msg, err := s.runs[i](ctx, i)
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
	return s.runs[i](middleware.WithCallAttributes(ctx, telemetry.ConversationCompacted.Bool(true)), i)
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

// attempt is one try of candidate i's turn, inside the session layer's
// retry. The message it makes names the provider and model that made it.
func (s *Session) attempt(ctx context.Context, i int) (Message, error) {
	s.popFailed() // the failed message must not reach the next request
	c := s.cands[i]
	req := Request{Model: c.model, Messages: s.request(), Tools: s.cfg.Tools}
	msg, err := c.call(ctx, req)
	if err != nil {
		msg = Message{Role: Assistant, StopReason: StopError, ErrorMessage: errorText(err, engine.SecretsFrom(ctx)),
			Provider: c.provider.Name(), Model: c.model}
		s.history = append(s.history, msg)
		return msg, &TurnError{Message: msg, Err: err}
	}
	if msg.Provider == "" {
		msg.Provider = c.provider.Name()
	}
	if msg.Model == "" {
		msg.Model = c.model
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
		return msg, nil
	}
}
