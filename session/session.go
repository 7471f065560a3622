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
	"github.com/retrace-go/retrace/internal/failure"
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

// Session is a conversation with a model. Its methods are safe for
// concurrent use, and turns run one at a time: a turn holds the session
// from its first attempt to its last, through the backoff waits between
// them (a history must not change under a turn that is retrying it), so a
// second Run or Continue, and History and Append too, wait until the turn
// in progress ends, for as long as its retries take. Conversations that
// must not wait for each other are separate sessions.
type Session struct {
	cfg   Config
	runs  []middleware.Handler[*turn, Message] // each candidate's session layer around one turn
	cands []*candidate                         // Provider and Model first, then the fallbacks
	chain middleware.Handler[*turn, Message]   // the fallback layer around the candidates; nil without fallbacks

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
	return s.take(ctx, append(s.history[:len(s.history):len(s.history)], Message{Role: User, Content: prompt}))
}

// Continue makes the assistant's next turn on the history as it is (after
// tool results, say). On failure the history is left as it was.
func (s *Session) Continue(ctx context.Context) (Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.take(ctx, s.history)
}

// take makes the assistant's turn on history: through the fallback chain
// when the session has one, else on its own provider. The session's
// history becomes the turn's only when the turn succeeded.
func (s *Session) take(ctx context.Context, history []Message) (Message, error) {
	t := &turn{history: history[:len(history):len(history)]} // appends cannot write into the session's
	ctx = engine.WithSecrets(ctx, s.secrets...)
	var msg Message
	var err error
	if s.chain != nil {
		msg, err = s.chain(ctx, t)
	} else {
		t.cand = s.cands[0]
		msg, err = s.overflowing(ctx, t)
	}
	if err == nil {
		s.history = t.history
	}
	return msg, err
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

// overflowing runs the session layer on t's candidate; after a context
// overflow it compacts the turn's history and runs it once more. That run
// is not a transient retry: it is a second call of the session layer, with
// its own span.
func (s *Session) overflowing(ctx context.Context, t *turn) (Message, error) {
	run := s.runs[t.cand.index]
	msg, err := run(ctx, t)
	fe, ok := errors.AsType[*policies.Error](err)
	if err == nil || !ok || fe.Outcome == "" || fe.Class != policies.ContextOverflow {
		return msg, err
	}
	t.popFailed()
	compacted, cerr := compact(ctx, s.cfg.Compactor, append([]Message(nil), t.history...)) // its own copy to shorten
	if e, bug := cerr.(*policies.Error); bug && e.Class == policies.Programming {
		// The compactor's bug decides what the turn's failure is: first in
		// the chain, it is what the classifier reads.
		return msg, fmt.Errorf("compaction failed: %w (the turn had overflowed: %w)", cerr, err)
	}
	if cerr != nil {
		return msg, fmt.Errorf("%w (compaction failed: %w)", err, cerr)
	}
	trace.SpanFromContext(ctx).AddEvent(telemetry.EventCompacted, trace.WithAttributes(
		telemetry.CompactionBefore.Int(len(t.history)),
		telemetry.CompactionAfter.Int(len(compacted)),
	))
	t.history = compacted[:len(compacted):len(compacted)]
	return run(middleware.WithCallAttributes(ctx, telemetry.ConversationCompacted.Bool(true)), t)
}

// compact runs the user's compactor. A compactor that panics is a bug in
// it, not in the turn: the panic becomes a Programming error, so that Run
// still restores the history and returns.
func compact(ctx context.Context, c Compactor, history []Message) (out []Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, failure.Recovered(v, debug.Stack())
		}
	}()
	return c(ctx, history)
}
