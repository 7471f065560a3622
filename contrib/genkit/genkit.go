package retracegenkit

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	gkmw "github.com/firebase/genkit/go/plugins/middleware"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/tool"
)

// Config configures the middleware. The zero value is the governance
// retrace's own agent layers have: the defaults of [session.Inference] for
// each model call (SessionRetry around it, a 2-minute timeout on each
// attempt), and tool.Config's defaults for every tool (ToolRetry, a breaker
// per tool, a bulkhead of 8).
type Config struct {
	// Model and Provider name the model calls' inference spans
	// ("chat {Model}", gen_ai.request.model, gen_ai.provider.name); Provider
	// is also the agent span's gen_ai.provider.name. An empty one is read
	// from the model genkit calls ("openai/gpt-4o": provider "openai", model
	// "gpt-4o"), which each Generate names in its options.
	Model    string
	Provider string
	// Agent is the agent's name: the agent span is "invoke_agent {Agent}",
	// with gen_ai.agent.name; empty → "invoke_agent", without it.
	Agent string
	// Retry is the retry of each model call, around its attempts; a zero
	// MaxAttempts means policies.SessionRetry (4 attempts, the first
	// included), as in session.Inference.
	Retry policies.RetryConfig
	// ModelTimeout bounds each model attempt; 0 → session.DefaultModelTimeout
	// (2 minutes).
	ModelTimeout time.Duration
	// Tool governs every tool call, each tool with a breaker of its own
	// (named after the tool unless Tool.Breaker.Name is set). Its Options
	// are added to Options for the tool layers. Without Tool.Breaker.State,
	// the breakers keep their state in the [Plugin] registered on the genkit
	// instance, if there is one, else in the Middleware.
	Tool tool.Config
	// Options configure every layer retrace adds: tracer and meter
	// providers, clock, classifier.
	Options []middleware.Option
}

// Middleware is an ai.Middleware that runs a Generate call through retrace:
// the whole tool loop is one agent layer (span "invoke_agent"), each model
// call an inference layer ("chat {model}", retrying) over a model layer per
// attempt, each tool call a governed "tool" layer. It is safe for
// concurrent use.
//
// Genkit calls New on the very value given to ai.WithUse, once per
// Generate, without copying it: the layers the Middleware builds, and the
// breakers of its tools, are shared by every Generate it is given to. Where
// the genkit instance has a [Plugin], the breakers keep their state there
// instead, so that a Middleware made per request, as in
//
//	resp, err := genkit.Generate(ctx, g, ai.WithUse(retracegenkit.New(cfg)), …)
//
// still finds every tool's breaker as the requests before it left it. A
// tool's bulkhead (Tool.MaxConcurrent) bounds the calls made through one
// Middleware value: share one to bound them across requests.
type Middleware struct {
	cfg Config

	mu     sync.Mutex
	agents map[agentKey]middleware.Handler[generateCall, *ai.ModelResponse]
	models map[modelKey]middleware.Handler[modelCall, answer]
	tools  map[toolKey]*tool.Tool
}

// New returns the middleware; pass it to ai.WithUse, first, so that its
// hooks enclose genkit's own middleware and name them in the trace.
func New(cfg Config) *Middleware {
	return &Middleware{
		cfg:    cfg,
		agents: map[agentKey]middleware.Handler[generateCall, *ai.ModelResponse]{},
		models: map[modelKey]middleware.Handler[modelCall, answer]{},
		tools:  map[toolKey]*tool.Tool{},
	}
}

// Name implements ai.Middleware.
func (m *Middleware) Name() string { return "retrace" }

// New implements ai.Middleware: the hooks of one Generate call.
func (m *Middleware) New(ctx context.Context) (*ai.Hooks, error) {
	g := &generation{m: m, breakers: breakerState(ctx)}
	return &ai.Hooks{WrapGenerate: g.wrapGenerate, WrapModel: g.wrapModel, WrapTool: g.wrapTool}, nil
}

// breakerState is the state the tools' breakers keep when the genkit
// instance that runs the Generate has a [Plugin], nil otherwise.
func breakerState(ctx context.Context) *state.Memory {
	g := genkit.FromContext(ctx)
	if g == nil {
		return nil
	}
	if p, ok := genkit.LookupPlugin(g, pluginName).(*Plugin); ok && p != nil {
		return p.state()
	}
	return nil
}

// generation is one Generate call's state: the model it calls and what
// genkit middleware its model calls pass through beneath retrace's, found
// when its first iteration starts, and where its tools' breakers keep their
// state.
type generation struct {
	m        *Middleware
	breakers *state.Memory
	model    string // the model's name, genkit's "provider/model"
	inner    inner  // genkit's retries beneath retrace's model hook
	outer    inner  // genkit's Retry around it

	mu      sync.Mutex
	loopOf  context.Context // the context the outer Retry calls the hook with
	loopCtx context.Context // that context inside the Retry's loop
}

// inner is the retrying genkit middleware on one side of retrace's model
// hook. ai.WithUse lists middleware outermost first: listed after retrace's,
// genkit's Retry and Fallback run inside its model hook, so each model call
// retrace makes is up to attempts provider calls; listed before it, genkit's
// Retry calls the hook once per attempt.
type inner struct {
	name     string
	attempts int
}

type generateCall struct {
	params *ai.GenerateParams
	next   ai.GenerateNext
}

// wrapGenerate runs the tool loop as one agent layer. Genkit calls the hook
// once per iteration, each iteration inside the one before it, so the first
// opens the layer and each later one marks a step of it.
func (g *generation) wrapGenerate(ctx context.Context, p *ai.GenerateParams, next ai.GenerateNext) (*ai.ModelResponse, error) {
	if p.Iteration > 0 {
		middleware.NextStep(ctx)
		return next(ctx, p)
	}
	maxTurns := 5 // genkit's default
	if p.Options != nil {
		g.model = p.Options.Model
		g.outer, g.inner = around(g.m, p.Options.Use)
		if p.Options.MaxTurns > 0 {
			maxTurns = p.Options.MaxTurns
		}
	}
	_, provider := g.m.names(g.model)
	return g.m.agent(agentKey{maxTurns: maxTurns, provider: provider})(ctx, generateCall{params: p, next: next})
}

// names is the model and provider the spans name: Config's, else those of
// genkit's "provider/model" name.
func (m *Middleware) names(full string) (model, provider string) {
	provider, model, ok := strings.Cut(full, "/")
	if !ok {
		provider, model = "", full
	}
	if m.cfg.Model != "" {
		model = m.cfg.Model
	}
	if m.cfg.Provider != "" {
		provider = m.cfg.Provider
	}
	return model, provider
}

// around finds genkit's Retry and Fallback in use, before m (outer: only a
// Retry, whose attempts each call m's hook) and after it (inner). A Fallback
// before m sends its other models' requests past m's hook: only a client's
// request middleware (middleware.SDK) sees those.
func around(m *Middleware, use []*ai.MiddlewareRef) (outer, in inner) {
	seen := false
	in, outer = inner{attempts: 1}, inner{attempts: 1}
	for _, ref := range use {
		if ref == nil {
			continue
		}
		switch mw := ref.Config.(type) {
		case *Middleware:
			seen = seen || mw == m
		case *gkmw.Retry:
			if seen {
				in = in.add("genkit.Retry", retryAttempts(mw))
			} else {
				outer = outer.add("genkit.Retry", retryAttempts(mw))
			}
		case *gkmw.Fallback:
			if seen {
				in = in.add("genkit.Fallback", 1+len(mw.Models))
			}
		}
	}
	return outer.orNone(), in.orNone()
}

func (in inner) orNone() inner {
	if in.attempts <= 1 {
		return inner{}
	}
	return in
}

func (in inner) add(name string, attempts int) inner {
	if attempts <= 1 {
		return in
	}
	if in.name != "" {
		name = in.name + "·" + name
	}
	return inner{name: name, attempts: in.attempts * attempts}
}

// retryAttempts is the calls genkit's Retry makes at most: MaxRetries
// (0 → its default, 3) retries after the first.
func retryAttempts(r *gkmw.Retry) int {
	if r.MaxRetries > 0 {
		return r.MaxRetries + 1
	}
	return 4
}

// agentKey is what an agent layer is built for.
type agentKey struct {
	maxTurns int
	provider string
}

func (m *Middleware) agent(k agentKey) middleware.Handler[generateCall, *ai.ModelResponse] {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.agents[k]; ok {
		return h
	}
	// A loop of maxTurns turns makes up to maxTurns+1 model calls: the last
	// answers or fails with "exceeded maximum tool call iterations".
	h := runtime.AgentLayer[generateCall, *ai.ModelResponse](m.cfg.Agent, k.provider, k.maxTurns+1, m.cfg.Options...)(
		func(ctx context.Context, c generateCall) (*ai.ModelResponse, error) { return c.next(ctx, c.params) })
	m.agents[k] = h
	return h
}

// wrapModel runs one model call through the inference layers, and hands the
// streaming callback the chunks of the attempt that answered, once it has.
func (g *generation) wrapModel(ctx context.Context, p *ai.ModelParams, next ai.ModelNext) (*ai.ModelResponse, error) {
	if g.outer.name != "" {
		ctx = g.withinOuter(ctx)
	}
	model, provider := g.m.names(g.model)
	a, err := g.m.inference(modelKey{model: model, provider: provider, inner: g.inner})(streamed(ctx, p), modelCall{params: p, next: next})
	if err != nil {
		return nil, genkitError(err)
	}
	if err := a.deliver(ctx, p.Callback); err != nil {
		return nil, err
	}
	return a.resp, nil
}

// withinOuter places the call inside genkit's Retry loop around the hook.
// The loop calls the hook with the same context on every attempt, and each
// tool-loop iteration calls the model chain with a context of its own, so a
// context not seen before starts a loop.
func (g *generation) withinOuter(ctx context.Context) context.Context {
	if t := reflect.TypeOf(ctx); t == nil || !t.Comparable() {
		return middleware.WithinRetry(ctx, g.outer.name, g.outer.attempts)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.loopOf != ctx {
		g.loopOf, g.loopCtx = ctx, middleware.WithinRetry(ctx, g.outer.name, g.outer.attempts)
	}
	return g.loopCtx
}

// errInterrupt stands for a tool's interrupt inside the chain: permanent, so
// that it is neither retried nor counted by the breaker.
var errInterrupt = &policies.Error{Class: policies.Permanent, Type: "interrupt", Err: errors.New("the tool interrupted the generation")}

// wrapTool runs one tool call under governance. Genkit ends the whole
// Generate when a tool returns an error, so a failure the chain gives up on
// reaches the model as the tool's output, {"error": {…}}, saying whether and
// when to try again; intermediate retries never reach it.
func (g *generation) wrapTool(ctx context.Context, p *ai.ToolParams, next ai.ToolNext) (*ai.MultipartToolResponse, error) {
	if p == nil || p.Tool == nil {
		return next(ctx, p)
	}
	var (
		resp      *ai.MultipartToolResponse // the successful attempt's response
		interrupt error                     // a tool's interrupt, which is control flow, not a failure
	)
	// Each attempt runs genkit's next hooks, then the tool.
	res := g.m.tool(p.Tool.Name(), g.breakers).InvokeWith(ctx, "", func(ctx context.Context, _ string) (string, error) {
		r, err := next(ctx, p)
		if err != nil {
			if ok, _ := ai.IsToolInterruptError(err); ok {
				interrupt = err
				return "", errInterrupt
			}
			return "", err
		}
		resp = r
		return "", nil
	})
	switch {
	case interrupt != nil:
		return nil, interrupt
	case res.Failure != nil:
		return &ai.MultipartToolResponse{Output: map[string]*tool.Failure{"error": res.Failure}}, nil
	}
	return resp, nil
}

// toolKey is what a governed tool is built for: its name, and the state its
// breaker keeps (a Plugin's), nil for the tool's own.
type toolKey struct {
	name  string
	state *state.Memory
}

func (m *Middleware) tool(name string, state *state.Memory) *tool.Tool {
	cfg := m.cfg.Tool
	if cfg.Breaker.State != nil {
		state = nil // the user's own State holds the breaker
	}
	k := toolKey{name: name, state: state}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.tools[k]; ok {
		return t
	}
	if state != nil {
		cfg.Breaker.State = state
	}
	cfg.Options = append(append([]middleware.Option{}, m.cfg.Options...), cfg.Options...)
	t := tool.New[struct{}, struct{}](name, nil, cfg) // each call brings genkit's hooks
	m.tools[k] = t
	return t
}
