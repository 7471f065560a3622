package session

import (
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// Inference is the shape of one logical model call, whoever makes it: a
// Session, an agent framework's adapter (contrib/eino, contrib/genkit), or
// a user's own handler around an SDK client. Its two layers are the ones a
// Session runs:
//
//   - the inference layer, layer "session": the inference span "chat {Model}"
//     (CLIENT, with the GenAI attributes from its start and the answer's
//     usage, model, ID and finish reasons at its end), covering the retry;
//   - the model layer, layer "model", once per attempt (INTERNAL, without
//     gen_ai.operation.name, so that a GenAI backend counts one operation per
//     logical call): the attempt's timeout and Policies.
//
// The zero value of each field is the Session's default.
type Inference[Resp any] struct {
	// Provider is gen_ai.provider.name ("openai", "anthropic"); empty
	// leaves it out.
	Provider string
	// Model is gen_ai.request.model; the span is "chat {Model}", or "chat"
	// when it is empty.
	Model string
	// Server and Port are server.address and server.port, when known.
	Server string
	Port   int
	// Stream sets gen_ai.request.stream=true on every call; a caller whose
	// calls differ sets it per call with middleware.WithCallAttributes.
	Stream bool
	// Retry is the logical call's retry; a zero MaxAttempts means
	// policies.SessionRetry (4 attempts, 2 s, 4 s, 8 s, unknown errors not
	// retried), its other fields kept.
	Retry policies.RetryConfig
	// Timeout bounds each attempt, so that a provider that never answers is
	// cut and retried; 0 → 2 minutes.
	Timeout time.Duration
	// Policies run around each attempt, inside the retry (a circuit breaker
	// for the provider).
	Policies []failsafe.Policy[Resp]
	// InnerAttempts declares the attempts a retry loop beneath each attempt
	// makes that retrace does not drive (an SDK's own retries without
	// middleware.SDK), named InnerName in the nested-retry event.
	InnerAttempts int
	InnerName     string
	// Describe reads what an answer says of itself: its Usage, Model,
	// ResponseID, StopReason and FirstChunk (the other fields are not
	// read); nil: nothing.
	Describe func(Resp) Message
	// Options configure both layers (tracer and meter providers, clock,
	// classifier).
	Options []middleware.Option
}

// DefaultModelTimeout bounds a model call's attempt when nothing else does.
const DefaultModelTimeout = 2 * time.Minute

// withDefaults fills the zero fields with the Session's defaults.
func (in Inference[Resp]) withDefaults() Inference[Resp] {
	in.Retry = in.Retry.OrPreset(policies.SessionRetry)
	if in.Timeout <= 0 {
		in.Timeout = DefaultModelTimeout
	}
	return in
}

// inferenceLayer is the logical model call's layer: "session", the
// inference span "chat {Model}" around the retry. Put the model layer beneath
// it, or use [InferenceLayers] for both.
func inferenceLayer[Req, Resp any](in Inference[Resp]) middleware.Middleware[Req, Resp] {
	in = in.withDefaults()
	attrs := []attribute.KeyValue{semconv.GenAIOperation.String("chat")}
	if in.Provider != "" {
		attrs = append(attrs, semconv.GenAIProvider.String(in.Provider))
	}
	name := "chat"
	if in.Model != "" {
		name += " " + in.Model
		attrs = append(attrs, semconv.GenAIRequestModel.String(in.Model))
	}
	if in.Stream {
		attrs = append(attrs, semconv.GenAIRequestStream.Bool(true))
	}
	if in.Server != "" {
		attrs = append(attrs, semconv.ServerAddress.String(in.Server))
		if in.Port > 0 {
			attrs = append(attrs, semconv.ServerPort.Int(in.Port))
		}
	}
	describe := in.Describe
	if describe == nil {
		describe = func(Resp) Message { return Message{} }
	}
	spec := middleware.Spec[Resp]{
		Policies: []failsafe.Policy[Resp]{policies.NewRetry[Resp](in.Retry)},
		EndAttributes: func(r Resp, err error) []attribute.KeyValue {
			if err != nil {
				return inferenceEnd(Message{}, err)
			}
			return inferenceEnd(describe(r), nil)
		},
		GenAIMetrics: func(r Resp) (int, int, bool) {
			// Without Describe an answer says nothing of its usage.
			u := describe(r).Usage
			return u.InputTokens, u.OutputTokens, in.Describe != nil
		},
	}
	opts := append(append([]middleware.Option{}, in.Options...),
		middleware.WithSpanName(name),
		middleware.WithSpanKind(trace.SpanKindClient),
		middleware.WithAttributes(attrs...),
	)
	return middleware.Layer[Req, Resp]("session", spec, opts...)
}

// modelCallLayer is the layer of each attempt of a logical model call:
// "model", INTERNAL, cut by the attempt's timeout, through Policies.
func modelCallLayer[Req, Resp any](in Inference[Resp]) middleware.Middleware[Req, Resp] {
	in = in.withDefaults()
	opts := append([]middleware.Option{}, in.Options...)
	if in.Retry.Classifier != nil {
		// The logical call's classifier judges its attempts too, so that a
		// failure has one class on the attempt's spans and the call's.
		opts = append(opts, middleware.WithClassifier(in.Retry.Classifier))
	}
	switch {
	case in.InnerName != "" && in.InnerAttempts > 1:
		opts = append(opts, middleware.WithInnerRetries(in.InnerName, in.InnerAttempts))
	case in.InnerAttempts > 1:
		opts = append(opts, middleware.WithInnerAttempts(in.InnerAttempts))
	}
	ps := append([]failsafe.Policy[Resp]{policies.NewTimeout[Resp](in.Timeout, nil)}, in.Policies...)
	return middleware.Layer[Req, Resp]("model", middleware.Spec[Resp]{Policies: ps}, opts...)
}

// InferenceLayers is the inference layer around the model layer: a logical model
// call as a Session makes it, for a handler that makes one attempt.
//
//	call := session.InferenceLayers[Prompt, *Reply](session.Inference[*Reply]{
//		Provider: "openai", Model: "gpt-4o-mini",
//		Describe: func(r *Reply) session.Message { return session.Message{Usage: r.Usage} },
//	})(handler)
func InferenceLayers[Req, Resp any](in Inference[Resp]) middleware.Middleware[Req, Resp] {
	return middleware.Chain(inferenceLayer[Req](in), modelCallLayer[Req](in))
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
		return []attribute.KeyValue{semconv.GenAIFinishReasons.StringSlice([]string{StopError})}
	}
	kv := []attribute.KeyValue{semconv.GenAIInputTokens.
		Int(m.Usage.InputTokens), semconv.GenAIOutputTokens.
		Int(m.Usage.OutputTokens), semconv.GenAIFinishReasons.
		StringSlice([]string{m.StopReason}),
	}
	if m.Model != "" {
		kv = append(kv, semconv.GenAIResponseModel.String(m.Model))
	}
	if m.ResponseID != "" {
		kv = append(kv, semconv.GenAIResponseID.String(m.ResponseID))
	}
	if m.FirstChunk > 0 {
		kv = append(kv, semconv.GenAITimeToFirstChunk.Float64(m.FirstChunk.Seconds()))
	}
	return kv
}
