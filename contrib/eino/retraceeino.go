package retraceeino

import (
	"context"
	"reflect"
	"sync"
	"time"
	"weak"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/tool"
)

// ModelRetryName is how eino's ModelRetryConfig is named in the nested-retry
// event: "eino.ModelRetry(3) × session(4)".
const ModelRetryName = "eino.ModelRetry"

// Config configures a [Middleware]. The zero value is the governance
// retrace's own agent layers have: the defaults of [session.Inference] for
// each model call (SessionRetry around it, a 2-minute timeout on each
// attempt), and tool.Config's defaults for every tool (ToolRetry, a breaker
// per tool, a bulkhead of 8).
type Config struct {
	// Model and Provider name the model calls' inference spans
	// ("chat {Model}", gen_ai.request.model, gen_ai.provider.name); Provider
	// is also the agent span's gen_ai.provider.name. Empty names are left
	// out.
	Model    string
	Provider string
	// Retry is the retry of each model call, around its attempts; a zero
	// MaxAttempts means policies.SessionRetry (4 attempts, the first
	// included), as in session.Inference.
	Retry policies.RetryConfig
	// ModelTimeout bounds each model attempt; 0 → session.DefaultModelTimeout
	// (2 minutes).
	ModelTimeout time.Duration
	// Classifier classifies the model's errors where the retry has none of
	// its own, and decides what eino's ModelRetryConfig may retry; nil → the
	// defaults, which decode eino-ext's OpenAI errors (its copy of
	// go-openai's APIError and RequestError) by their shape.
	Classifier *policies.Classifier
	// Tool is the governance of every tool the agent calls, and Tools a
	// tool's own, by name. A tool's breaker is named after the tool.
	Tool  tool.Config
	Tools map[string]tool.Config
	// MaxSteps is the agent's MaxIterations, for the worst case of the agent
	// span; 0 → 20, eino's default.
	MaxSteps int
	// Clock is what the retries' sleeps, the breakers' cool-downs and the
	// timeouts run on where a policy or tool.Config has none, and what a
	// stream's first chunk is timed on; nil → the wall clock.
	Clock clock.Clock
	// Options configure every layer's tracing (tracer provider, meter
	// provider, …).
	Options []middleware.Option
}

// defaultMaxSteps is eino's default MaxIterations.
const defaultMaxSteps = 20

// Middleware is an eino ChatModelAgentMiddleware that sends the agent's
// model calls through retrace's inference layers and its tool calls
// (invokable, streamable and enhanced) through retrace's tool governance.
// Register it in ChatModelAgentConfig.Handlers, and run the agent through
// [Middleware.Agent] so that one run is one trace.
//
// A Middleware holds state that must outlive a run: each tool's breaker,
// by tool name, and the ModelRetryConfigs it has governed. Make one with
// [New] when the program starts and share it among the agents and runs it
// governs; a Middleware made per run has a fresh breaker each time, which
// never opens. It is safe for concurrent use.
type Middleware struct {
	*adk.BaseChatModelAgentMiddleware
	cfg   Config
	model middleware.Handler[modelRequest, modelResult]
	// swallowing holds the types of eino's utils.WrapToolWithErrorHandler
	// wrappers, which the middleware refuses (see BeforeAgent).
	swallowing map[reflect.Type]bool

	mu    sync.Mutex
	tools map[string]*tool.Tool
	// retries are the ModelRetryConfigs whose predicates govern already,
	// held weakly, so that an agent's config is collected with the agent.
	retries map[weak.Pointer[adk.ModelRetryConfig]]struct{}
	pruneAt int
}

var _ adk.ChatModelAgentMiddleware = (*Middleware)(nil)

// New returns the middleware.
func New(cfg Config) *Middleware {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = defaultMaxSteps
	}
	var base []middleware.Option
	if cfg.Clock != nil {
		base = append(base, middleware.WithClock(cfg.Clock))
	}
	cfg.Options = append(base, cfg.Options...)

	h := &Middleware{
		BaseChatModelAgentMiddleware: &adk.BaseChatModelAgentMiddleware{},
		cfg:                          cfg,
		swallowing:                   swallowingTypes(),
		tools:                        map[string]*tool.Tool{},
		retries:                      map[weak.Pointer[adk.ModelRetryConfig]]struct{}{},
	}
	opts := cfg.Options
	if cfg.Classifier != nil {
		opts = append(append([]middleware.Option{}, opts...), middleware.WithClassifier(cfg.Classifier))
	}
	// One Inference for both layers: the defaults are the session
	// package's, filled once there, not copied here.
	h.model = session.InferenceLayers[modelRequest](session.Inference[modelResult]{
		Provider: cfg.Provider,
		Model:    cfg.Model,
		Retry:    cfg.Retry,
		Timeout:  cfg.ModelTimeout,
		Describe: func(r modelResult) session.Message { return r.summary },
		Options:  opts,
	})(h.callModel)
	return h
}

// clock is what a stream's first chunk is timed on.
func (h *Middleware) clock() clock.Clock {
	if h.cfg.Clock != nil {
		return h.cfg.Clock
	}
	return clock.Real()
}

// BeforeModelRewriteState marks the start of the agent's next step and,
// when the agent has a ModelRetryConfig, governs and declares eino's retry:
// it runs outside every WrapModel wrapper, so each of its attempts calls the
// inference layer anew. Its predicate is made to stop where retrace's
// classification does (see [Middleware.governRetry]), and the context
// returned here, which all of its attempts see, declares its attempts
// ([middleware.WithinRetry]).
func (h *Middleware) BeforeModelRewriteState(ctx context.Context, state *adk.ChatModelAgentState, mc *adk.ModelContext) (context.Context, *adk.ChatModelAgentState, error) {
	middleware.NextStep(ctx)
	if mc != nil && mc.ModelRetryConfig != nil {
		h.governRetry(mc.ModelRetryConfig)
		if mc.ModelRetryConfig.MaxRetries > 0 {
			ctx = middleware.WithinRetry(ctx, ModelRetryName, mc.ModelRetryConfig.MaxRetries+1)
		}
	}
	return ctx, state, nil
}

// WrapModel sends each model call, Generate and Stream, through the
// inference layers: the inference span "chat {Model}" around the retry, and
// a model span per attempt.
func (h *Middleware) WrapModel(_ context.Context, m model.BaseModel[*schema.Message], _ *adk.ModelContext) (model.BaseModel[*schema.Message], error) {
	return &governedModel{inner: m, call: h.model}, nil
}

type governedModel struct {
	inner model.BaseModel[*schema.Message]
	call  middleware.Handler[modelRequest, modelResult]
}

func (g *governedModel) Generate(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	ctx = middleware.WithCallAttributes(ctx, semconv.GenAIRequestStreamKey.Bool(false))
	res, err := g.call(ctx, modelRequest{m: g.inner, input: input, opts: opts})
	if err != nil {
		return nil, err
	}
	return res.msg, nil
}

func (g *governedModel) Stream(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	ctx = middleware.WithCallAttributes(ctx, semconv.GenAIRequestStreamKey.Bool(true))
	res, err := g.call(ctx, modelRequest{m: g.inner, input: input, opts: opts, stream: true})
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray(res.chunks), nil
}
