package retraceeino

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	einotool "github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

// ModelRetryName is how eino's ModelRetryConfig is named in the nested-retry
// event: "eino.ModelRetry(3) × session(4)".
const ModelRetryName = "eino.ModelRetry"

// Config configures a [Middleware]. The zero value is the governance
// retrace's own agent layers have: SessionRetry around each model call, a
// 2-minute timeout on each attempt, and tool.Config's defaults for every tool
// (ToolRetry, a breaker per tool, a bulkhead of 8).
type Config struct {
	// Model and Provider name the model calls' spans ("chat {Model}",
	// gen_ai.request.model, gen_ai.provider.name); empty names are left out.
	Model    string
	Provider string
	// Retry is the session layer's retry around each model call; a zero
	// MaxAttempts means policies.SessionRetry (4 attempts, the first
	// included).
	Retry policies.RetryConfig
	// ModelTimeout bounds each model attempt; 0 → 2 minutes.
	ModelTimeout time.Duration
	// Classifier classifies the model's errors where the retry has none of
	// its own; nil → the rules of eino-ext's OpenAI model ([OpenAIRule]),
	// then the defaults.
	Classifier *policies.Classifier
	// Tool is the governance of every tool the agent calls, and Tools a
	// tool's own, by name. A tool's breaker is named after the tool.
	Tool  tool.Config
	Tools map[string]tool.Config
	// MaxSteps is the agent's MaxIterations, for the worst case of the agent
	// span; 0 → 20, eino's default.
	MaxSteps int
	// Clock is what the retries' sleeps, the breakers' cool-downs and the
	// timeouts run on where a policy or tool.Config has none; nil → the wall
	// clock.
	Clock clock.Clock
	// Options configure every layer's tracing (tracer provider, meter
	// provider, …).
	Options []middleware.Option
}

// Middleware is an eino ChatModelAgentMiddleware that sends the agent's
// model calls through retrace's session layer and its invokable tool calls
// through retrace's tool governance. Register it in
// ChatModelAgentConfig.Handlers, and run the agent through [Middleware.Agent]
// so that one run is one trace. It is safe for concurrent use.
type Middleware struct {
	*adk.BaseChatModelAgentMiddleware
	cfg     Config
	session middleware.Handler[modelRequest, modelResult]
	mu      sync.Mutex
	tools   map[string]*tool.Tool
}

var _ adk.ChatModelAgentMiddleware = (*Middleware)(nil)

// New returns the middleware.
func New(cfg Config) *Middleware {
	cfg.Retry = cfg.Retry.OrPreset(policies.SessionRetry)
	if cfg.ModelTimeout <= 0 {
		cfg.ModelTimeout = 2 * time.Minute
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 20
	}
	if cfg.Classifier == nil {
		cfg.Classifier = policies.NewClassifier(OpenAIRule)
	}
	var base []middleware.Option
	if cfg.Clock != nil {
		base = append(base, middleware.WithClock(cfg.Clock))
	}
	base = append(base, cfg.Options...)
	cfg.Options = base

	spanName, attrs := "chat", []middleware.Option{middleware.WithSpanKind(trace.SpanKindClient)}
	if cfg.Model != "" {
		spanName += " " + cfg.Model
		attrs = append(attrs, middleware.WithAttributes(telemetry.GenAIRequestModel.String(cfg.Model)))
	}
	if cfg.Provider != "" {
		attrs = append(attrs, middleware.WithAttributes(telemetry.GenAIProvider.String(cfg.Provider)))
	}
	modelOpts := append(append(append([]middleware.Option{}, base...), middleware.WithClassifier(cfg.Classifier),
		middleware.WithSpanName(spanName), middleware.WithAttributes(telemetry.GenAIOperation.String("chat"))), attrs...)
	modelLayer := middleware.PoliciesWith[modelRequest, modelResult]("model", modelOpts,
		policies.NewTimeout[modelResult](cfg.ModelTimeout, nil))(callModel)
	sessionOpts := append(append([]middleware.Option{}, base...), middleware.WithClassifier(cfg.Classifier))
	session := middleware.PoliciesWith[modelRequest, modelResult]("session", sessionOpts,
		failsafe.Policy[modelResult](policies.NewRetry[modelResult](cfg.Retry)))(modelLayer)
	return &Middleware{BaseChatModelAgentMiddleware: &adk.BaseChatModelAgentMiddleware{}, cfg: cfg, session: session, tools: map[string]*tool.Tool{}}
}

// modelRequest is one model call as the layers see it.
type modelRequest struct {
	m      model.BaseModel[*schema.Message]
	input  []*schema.Message
	opts   []model.Option
	stream bool
}

// modelResult is a model call's answer: the message, or a stream's chunks.
type modelResult struct {
	msg    *schema.Message
	chunks []*schema.Message
}

// callModel is the model layer's handler: one call of the model eino wraps.
// A stream is read to its end inside the attempt, so that a stream that
// fails midway is a failed attempt the session layer can retry, not text
// half delivered to the agent.
func callModel(ctx context.Context, req modelRequest) (modelResult, error) {
	var res modelResult
	if !req.stream {
		msg, err := req.m.Generate(ctx, req.input, req.opts...)
		if err != nil {
			return res, err
		}
		res.msg = msg
	} else {
		sr, err := req.m.Stream(ctx, req.input, req.opts...)
		if err != nil {
			return res, err
		}
		defer sr.Close()
		for {
			chunk, err := sr.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return modelResult{}, err
			}
			res.chunks = append(res.chunks, chunk)
		}
		if len(res.chunks) == 0 {
			return res, errors.New("the model's stream ended without a message")
		}
	}
	recordUsage(ctx, res)
	return res, nil
}

func recordUsage(ctx context.Context, res modelResult) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	msgs := res.chunks
	if res.msg != nil {
		msgs = []*schema.Message{res.msg}
	}
	for _, m := range msgs {
		if m == nil || m.ResponseMeta == nil {
			continue
		}
		if u := m.ResponseMeta.Usage; u != nil {
			span.SetAttributes(telemetry.GenAIInputTokens.Int(u.PromptTokens), telemetry.GenAIOutputTokens.Int(u.CompletionTokens))
		}
		if r := m.ResponseMeta.FinishReason; r != "" {
			span.SetAttributes(telemetry.GenAIFinishReasons.StringSlice([]string{r}))
		}
	}
}

// BeforeModelRewriteState marks the start of the agent's next step and, when
// the agent has a ModelRetryConfig, declares eino's retry: it runs outside
// every WrapModel wrapper, so each of its attempts calls the session layer
// anew, and the context returned here is the one all of them see.
func (h *Middleware) BeforeModelRewriteState(ctx context.Context, state *adk.ChatModelAgentState, mc *adk.ModelContext) (context.Context, *adk.ChatModelAgentState, error) {
	middleware.NextStep(ctx)
	if mc != nil && mc.ModelRetryConfig != nil && mc.ModelRetryConfig.MaxRetries > 0 {
		ctx = middleware.WithinRetry(ctx, ModelRetryName, mc.ModelRetryConfig.MaxRetries+1)
	}
	return ctx, state, nil
}

// WrapModel sends each model call, Generate and Stream, through the session
// layer: its retry, and a model span per attempt.
func (h *Middleware) WrapModel(_ context.Context, m model.BaseModel[*schema.Message], _ *adk.ModelContext) (model.BaseModel[*schema.Message], error) {
	return &governedModel{inner: m, session: h.session}, nil
}

type governedModel struct {
	inner   model.BaseModel[*schema.Message]
	session middleware.Handler[modelRequest, modelResult]
}

func (g *governedModel) Generate(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	res, err := g.session(ctx, modelRequest{m: g.inner, input: input, opts: opts})
	if err != nil {
		return nil, err
	}
	return res.msg, nil
}

func (g *governedModel) Stream(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	res, err := g.session(ctx, modelRequest{m: g.inner, input: input, opts: opts, stream: true})
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray(res.chunks), nil
}

// endpointKey carries one tool call's eino endpoint to the governed tool's
// handler, which is built once per tool name so that its breaker outlives
// the call.
type endpointKey struct{}

type toolCall struct {
	endpoint  adk.InvokableToolCallEndpoint
	opts      []einotool.Option
	interrupt error // an eino interrupt, which must reach eino as it is
}

// WrapInvokableToolCall sends the tool call through the tool's governance
// (classification, retry with jitter and the task budget, the tool's
// breaker, a bulkhead) and hands the model the final result: the tool's
// output, or on failure the structured failure of tool.Failure as the tool
// message, so that the agent reads what to do instead of its run ending.
// An eino interrupt is passed through as it is.
func (h *Middleware) WrapInvokableToolCall(_ context.Context, endpoint adk.InvokableToolCallEndpoint, tCtx *adk.ToolContext) (adk.InvokableToolCallEndpoint, error) {
	if tCtx == nil {
		return endpoint, nil
	}
	t := h.tool(tCtx.Name)
	return func(ctx context.Context, args string, opts ...einotool.Option) (string, error) {
		call := &toolCall{endpoint: endpoint, opts: opts}
		res := t.Invoke(context.WithValue(ctx, endpointKey{}, call), args)
		if call.interrupt != nil {
			return "", call.interrupt
		}
		return res.Content, nil
	}, nil
}

// tool returns the governed tool of that name, built on its first call.
func (h *Middleware) tool(name string) *tool.Tool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.tools[name]; ok {
		return t
	}
	cfg, ok := h.cfg.Tools[name]
	if !ok {
		cfg = h.cfg.Tool
	}
	if cfg.Clock == nil {
		cfg.Clock = h.cfg.Clock
	}
	cfg.Options = append(append([]middleware.Option{}, h.cfg.Options...), cfg.Options...)
	t := tool.New(name, runEndpoint, cfg)
	h.tools[name] = t
	return t
}

// runEndpoint is a governed tool's handler: one call of the eino endpoint.
func runEndpoint(ctx context.Context, args json.RawMessage) (string, error) {
	call, _ := ctx.Value(endpointKey{}).(*toolCall)
	if call == nil {
		return "", &policies.Error{Class: policies.Programming, Type: "no_endpoint",
			Err: errors.New("retraceeino: a tool call without its eino endpoint")}
	}
	out, err := call.endpoint(ctx, string(args), call.opts...)
	if err == nil {
		return out, nil
	}
	if isInterrupt(err) {
		// Not a failure: eino pauses the run. It is not retried, not counted
		// by the breaker, and returned to eino unchanged.
		call.interrupt = err
		return "", &policies.Error{Class: policies.Canceled, Type: "eino_interrupt", Err: err}
	}
	return "", err
}

func isInterrupt(err error) bool {
	if _, ok := compose.ExtractInterruptInfo(err); ok {
		return true
	}
	_, ok := compose.IsInterruptRerunError(err)
	return ok
}
