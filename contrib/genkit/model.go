package retracegenkit

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/firebase/genkit/go/ai"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
)

// modelKey is what a model call's layers are built for: the names of their
// spans, and genkit's retries beneath them.
type modelKey struct {
	model, provider string
	inner           inner
}

// modelCall is one model call as the layers see it: genkit's request and
// streaming callback, and the rest of genkit's model chain.
type modelCall struct {
	params *ai.ModelParams
	next   ai.ModelNext
}

// answer is a model attempt that answered: genkit's response, and, for a
// streamed call, the chunks it streamed, which reach the user's callback
// only once the attempt is known good.
type answer struct {
	resp   *ai.ModelResponse
	chunks []*ai.ModelResponseChunk
	first  time.Duration // the first chunk's arrival after the attempt began
}

// inference returns the layers of a model call for k, built once: the
// inference layer ("chat {model}", the retry) over the model layer (one per
// attempt: the timeout), with the session package's defaults.
func (m *Middleware) inference(k modelKey) middleware.Handler[modelCall, answer] {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.models[k]; ok {
		return h
	}
	h := session.InferenceLayers[modelCall](session.Inference[answer]{
		Provider:      k.provider,
		Model:         k.model,
		Retry:         m.cfg.Retry,
		Timeout:       m.cfg.ModelTimeout,
		InnerAttempts: k.inner.attempts,
		InnerName:     k.inner.name,
		Describe:      describe,
		Options:       m.cfg.Options,
	})(attempt)
	m.models[k] = h
	return h
}

// streamed marks a streamed call on its inference span
// (gen_ai.request.stream).
func streamed(ctx context.Context, p *ai.ModelParams) context.Context {
	return middleware.WithCallAttributes(ctx, semconv.GenAIRequestStreamKey.Bool(p.Callback != nil))
}

// attempt is the model layer's handler: one call of the rest of genkit's
// model chain. A streamed call's chunks are kept, not passed on: an attempt
// that fails after some of them would otherwise leave its text in the
// user's callback, followed by the whole answer of the attempt that
// succeeds.
func attempt(ctx context.Context, c modelCall) (answer, error) {
	p := c.params
	if p.Callback == nil {
		resp, err := c.next(ctx, p)
		return answer{resp: resp}, err
	}
	buf := &chunkBuffer{start: time.Now()}
	params := *p
	params.Callback = buf.add
	resp, err := c.next(ctx, &params)
	chunks, first := buf.close()
	if err != nil {
		return answer{}, streamFailure(ctx, err, len(chunks) > 0)
	}
	if resp == nil || (resp.Operation == nil && unfinished(resp.FinishReason)) {
		// A model says why its answer ended in the chunk that ends it.
		// compat_oai's openai-go stream ends as cleanly at a body closed
		// before [DONE] as at [DONE] itself, so the clean end proves
		// nothing: the short answer is a dropped stream, to be retried, as
		// retrace's own provider says of it.
		return answer{}, policies.StreamDropped("", io.ErrUnexpectedEOF)
	}
	return answer{resp: resp, chunks: chunks, first: first}, nil
}

// unfinished reports whether a finish reason says the answer did not end:
// none, or genkit's "unknown", which compat_oai reports for a stream whose
// finish reason never came (and for a reason it does not know, which no
// OpenAI-compatible server's complete answer ends with).
func unfinished(r ai.FinishReason) bool {
	return r == "" || r == ai.FinishReasonUnknown
}

// streamFailure is the error of a streamed attempt. An error that says what
// went wrong is kept: the provider's answer (an error answer or event, which
// the core decodes by its shape, or reads from middleware.SDK's request
// beneath), a failure retrace already classified (middleware.SDK's
// dropped stream (policies.StreamDropped) for a body without its terminator), the end of the
// attempt's context (its timeout, or the caller's). A failure to read a
// stream that had begun (a reset connection, a body cut short) dropped it:
// a dropped stream (policies.StreamDropped), as retrace's own provider says of it, whatever
// the network said.
func streamFailure(ctx context.Context, err error, begun bool) error {
	if !begun || ctx.Err() != nil {
		return err
	}
	if se, ok := errors.AsType[*policies.Error](err); ok && se.Type == "stream_dropped" {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return policies.StreamDropped("", err)
	}
	return err
}

// chunkBuffer keeps one attempt's chunks. Genkit calls a stream's callback
// from the model call it is given to, so the chunks come in order; the lock
// keeps a model that kept calling after it returned from racing the
// attempt's end, and closed drops what it sends then.
type chunkBuffer struct {
	start time.Time

	mu     sync.Mutex
	chunks []*ai.ModelResponseChunk
	first  time.Duration
	closed bool
}

// add keeps a copy of ch: a model may reuse its chunk for the next one.
func (b *chunkBuffer) add(_ context.Context, ch *ai.ModelResponseChunk) error {
	if ch == nil {
		return nil
	}
	c := *ch
	c.Content = slices.Clone(ch.Content)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if len(b.chunks) == 0 {
		b.first = max(time.Since(b.start), time.Nanosecond)
	}
	b.chunks = append(b.chunks, &c)
	return nil
}

func (b *chunkBuffer) close() ([]*ai.ModelResponseChunk, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.chunks, b.first
}

// deliver hands the answering attempt's chunks to the user's callback, in
// the order the model streamed them. A callback's error ends the model call
// with it, as it does when genkit calls the callback itself.
func (a answer) deliver(ctx context.Context, cb ai.ModelStreamCallback) error {
	if cb == nil {
		return nil
	}
	for _, ch := range a.chunks {
		if err := cb(ctx, ch); err != nil {
			return err
		}
	}
	return nil
}

// describe is what the inference span says of an answer: genkit's finish
// reason and usage, and the model and completion ID when the plugin keeps
// them in the response's Raw metadata (compat_oai's "model" and "id").
func describe(a answer) session.Message {
	msg := session.Message{FirstChunk: a.first}
	r := a.resp
	if r == nil {
		return msg
	}
	msg.StopReason = string(r.FinishReason)
	if u := r.Usage; u != nil {
		msg.Usage = session.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	}
	if raw, ok := r.Raw.(map[string]any); ok {
		msg.Model, _ = raw["model"].(string)
		msg.ResponseID, _ = raw["id"].(string)
	}
	return msg
}
