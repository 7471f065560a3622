package retracegenkit

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"github.com/firebase/genkit/go/ai"
	gkmw "github.com/firebase/genkit/go/plugins/middleware"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

// Config configures the middleware. The zero value is retrace's defaults:
// model calls retried as a session retries them (policies.SessionRetry),
// tool calls under tool.New's governance (policies.ToolRetry, a breaker
// per tool, a bulkhead of 8).
type Config struct {
	// Retry is the model call's retry; a zero MaxAttempts means
	// policies.SessionRetry (4 attempts, the first included).
	Retry policies.RetryConfig
	// Tool governs every tool call, each tool with a breaker of its own
	// (named after the tool unless Tool.Breaker.Name is set). Its Options
	// are added to Options for the tool layers.
	Tool tool.Config
	// Options configure every layer retrace adds: tracer and meter
	// providers, clock, classifier.
	Options []middleware.Option
}

// Middleware is an ai.Middleware that runs a Generate call through retrace:
// the whole tool loop is one "agent" layer (span "invoke_agent"), each
// model call a retrying "session" layer, each tool call a governed "tool"
// layer. Its breakers and their state are shared by every Generate call it
// is used in. It is safe for concurrent use.
type Middleware struct {
	cfg    Config
	opts   []middleware.Option // Options, with the classifier of genkit's errors first
	mu     sync.Mutex
	agents map[int]middleware.Handler[generateCall, *ai.ModelResponse]
	models map[inner]middleware.Handler[modelCall, *ai.ModelResponse]
	tools  map[string]*tool.Tool
}

// New returns the middleware; pass it to ai.WithUse, first, so that its
// hooks enclose genkit's own middleware and name them in the trace.
func New(cfg Config) *Middleware {
	cfg.Retry = cfg.Retry.OrPreset(policies.SessionRetry)
	// A classifier given in Options comes later and wins.
	opts := append([]middleware.Option{middleware.WithClassifier(Classifier())}, cfg.Options...)
	return &Middleware{
		cfg:    cfg,
		opts:   opts,
		agents: map[int]middleware.Handler[generateCall, *ai.ModelResponse]{},
		models: map[inner]middleware.Handler[modelCall, *ai.ModelResponse]{},
		tools:  map[string]*tool.Tool{},
	}
}

// Name implements ai.Middleware.
func (m *Middleware) Name() string { return "retrace" }

// New implements ai.Middleware: the hooks of one Generate call.
func (m *Middleware) New(context.Context) (*ai.Hooks, error) {
	g := &generation{m: m}
	return &ai.Hooks{WrapGenerate: g.wrapGenerate, WrapModel: g.wrapModel, WrapTool: m.wrapTool}, nil
}

// generation is one Generate call's state: what genkit middleware its model
// calls pass through beneath retrace's, found when its first iteration starts.
type generation struct {
	m     *Middleware
	inner inner // genkit's retries beneath retrace's model hook
	outer inner // genkit's Retry around it

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

type modelCall struct {
	params *ai.ModelParams
	next   ai.ModelNext
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
		g.outer, g.inner = around(g.m, p.Options.Use)
		if p.Options.MaxTurns > 0 {
			maxTurns = p.Options.MaxTurns
		}
	}
	return g.m.agent(maxTurns)(ctx, generateCall{params: p, next: next})
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

func (m *Middleware) agent(maxTurns int) middleware.Handler[generateCall, *ai.ModelResponse] {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.agents[maxTurns]; ok {
		return h
	}
	// A loop of maxTurns turns makes up to maxTurns+1 model calls: the last
	// answers or fails with "exceeded maximum tool call iterations".
	opts := append(append([]middleware.Option{}, m.opts...),
		middleware.WithSpanName("invoke_agent"),
		middleware.WithAttributes(telemetry.GenAIOperation.String("invoke_agent")),
		middleware.WithSteps(maxTurns+1))
	h := middleware.PoliciesWith[generateCall, *ai.ModelResponse]("agent", opts)(
		func(ctx context.Context, c generateCall) (*ai.ModelResponse, error) { return c.next(ctx, c.params) })
	m.agents[maxTurns] = h
	return h
}

// wrapModel runs one model call through the session layer's retry.
func (g *generation) wrapModel(ctx context.Context, p *ai.ModelParams, next ai.ModelNext) (*ai.ModelResponse, error) {
	if g.outer.name != "" {
		ctx = g.withinOuter(ctx)
	}
	return g.m.model(g.inner)(ctx, modelCall{params: p, next: next})
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

func (m *Middleware) model(in inner) middleware.Handler[modelCall, *ai.ModelResponse] {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.models[in]; ok {
		return h
	}
	opts := append([]middleware.Option{}, m.opts...)
	if in.name != "" {
		// Each of retrace's attempts is up to in.attempts provider calls.
		opts = append(opts, middleware.WithInnerRetries(in.name, in.attempts))
	}
	h := middleware.PoliciesWith[modelCall, *ai.ModelResponse]("session", opts,
		policies.NewRetry[*ai.ModelResponse](m.cfg.Retry))(
		func(ctx context.Context, c modelCall) (*ai.ModelResponse, error) { return c.next(ctx, c.params) })
	m.models[in] = h
	return h
}

// toolCall carries one genkit tool call through the tool's chain, which is
// built once per tool and takes no per-call arguments of genkit's types.
type toolCall struct {
	params    *ai.ToolParams
	next      ai.ToolNext
	resp      *ai.MultipartToolResponse // the successful attempt's response
	interrupt error                     // a tool's interrupt, which is control flow, not a failure
}

type toolCallKey struct{}

// errInterrupt stands for a tool's interrupt inside the chain: permanent, so
// that it is neither retried nor counted by the breaker.
var errInterrupt = &policies.Error{Class: policies.Permanent, Type: "interrupt", Err: errors.New("the tool interrupted the generation")}

// wrapTool runs one tool call under governance. Genkit ends the whole
// Generate when a tool returns an error, so a failure the chain gives up on
// reaches the model as the tool's output, {"error": {…}}, saying whether and
// when to try again; intermediate retries never reach it.
func (m *Middleware) wrapTool(ctx context.Context, p *ai.ToolParams, next ai.ToolNext) (*ai.MultipartToolResponse, error) {
	if p == nil || p.Tool == nil {
		return next(ctx, p)
	}
	c := &toolCall{params: p, next: next}
	res := m.tool(p.Tool.Name()).Invoke(context.WithValue(ctx, toolCallKey{}, c), "")
	switch {
	case c.interrupt != nil:
		return nil, c.interrupt
	case res.Failure != nil:
		return &ai.MultipartToolResponse{Output: map[string]*tool.Failure{"error": res.Failure}}, nil
	}
	return c.resp, nil
}

func (m *Middleware) tool(name string) *tool.Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.tools[name]; ok {
		return t
	}
	cfg := m.cfg.Tool
	cfg.Options = append(append([]middleware.Option{}, m.opts...), cfg.Options...)
	t := tool.New(name, runTool, cfg)
	m.tools[name] = t
	return t
}

// runTool is one attempt of a tool call: genkit's next hooks, then the tool.
func runTool(ctx context.Context, _ struct{}) (struct{}, error) {
	c, _ := ctx.Value(toolCallKey{}).(*toolCall)
	if c == nil {
		return struct{}{}, &policies.Error{Class: policies.Programming, Type: "no_tool_call", Err: errors.New("retracegenkit: a tool chain ran outside a genkit tool call")}
	}
	resp, err := c.next(ctx, c.params)
	if err != nil {
		if ok, _ := ai.IsToolInterruptError(err); ok {
			c.interrupt = err
			return struct{}{}, errInterrupt
		}
		return struct{}{}, err
	}
	c.resp = resp
	return struct{}{}, nil
}
