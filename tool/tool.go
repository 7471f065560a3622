package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/failsafe-go/failsafe-go"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
)

// Func is a tool's implementation.
type Func[A, R any] func(ctx context.Context, args A) (R, error)

// Config configures a governed tool. The zero value is a sensible governance:
// ToolRetry, a breaker, a bulkhead of 8.
type Config struct {
	// Description and Parameters (a JSON schema) tell the model what the tool does.
	Description string
	Parameters  map[string]any
	// Retry is the tool's retry; a zero MaxAttempts means policies.ToolRetry:
	// MaxAttempts 3 counts the first call, so a tool call makes at most 2
	// retries, each drawn from the task's retry budget.
	Retry policies.RetryConfig
	// Breaker is the tool's circuit breaker; the zero value opens after 5
	// consecutive Transient failures, stays open for 60 s, then lets one
	// probe through.
	Breaker policies.BreakerConfig
	// NoBreaker turns the breaker off.
	NoBreaker bool
	// MaxConcurrent bounds the calls that run at once (0 → 8); MaxWait is how
	// long a call waits for a slot before it is refused (0 → no wait).
	MaxConcurrent int
	MaxWait       time.Duration
	// Timeout bounds each attempt; 0 → none.
	Timeout time.Duration
	// Clock is what the retry sleeps, the breaker's cool-down and the timeout
	// run on; nil → the wall clock.
	Clock clock.Clock
	// Options configure the tool layer's tracing.
	Options []middleware.Option
}

// Tool is a governed tool. It is safe for concurrent use.
type Tool struct {
	name  string
	spec  session.Tool
	max   int
	chain middleware.Handler[*call, string]
	// prepare turns a call's arguments into its work (New's decoding and
	// the tool's Func); nil for a tool whose calls each bring their work.
	prepare func(args string) (Handler, error)
}

// Handler is a call's work, one attempt of it: the model's arguments, as
// JSON, in; the result for the model out. A call brings its own with
// [Tool.CallWith] and [Tool.InvokeWith].
type Handler func(ctx context.Context, args string) (string, error)

// call is one call as the tool's chain carries it: each attempt runs work
// on args.
type call struct {
	args string
	work Handler
}

// New returns fn as a governed tool. Arguments arrive from the model as
// JSON and are decoded into A; the result is encoded as JSON for the model
// (a string result is passed as is). With a nil fn, each call brings its
// work ([Tool.CallWith]): an adapter's tool whose work is per call, such as
// an agent framework's endpoint or an MCP session's request.
//
// The arguments are decoded once, before the chain: arguments that are not
// valid fail at once (Permanent, invalid_arguments), no attempt made.
func New[A, R any](name string, fn Func[A, R], cfg Config) *Tool {
	cfg.Retry = cfg.Retry.OrPreset(policies.ToolRetry)
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 8
	}
	if cfg.Breaker.Name == "" {
		cfg.Breaker.Name = name
	}
	if cfg.Clock != nil {
		// The layer's clock reaches every policy without one of its own.
		cfg.Options = append([]middleware.Option{middleware.WithClock(cfg.Clock)}, cfg.Options...)
	}
	ps := []failsafe.Policy[string]{policies.NewRetry[string](cfg.Retry)}
	t := &Tool{name: name, max: cfg.Retry.MaxAttempts, spec: session.Tool{Name: name, Description: cfg.Description, Parameters: cfg.Parameters}}
	if !cfg.NoBreaker {
		ps = append(ps, policies.NewCircuitBreaker[string](cfg.Breaker))
	}
	ps = append(ps, policies.NewBulkhead[string](cfg.MaxConcurrent, cfg.MaxWait))
	if cfg.Timeout > 0 {
		ps = append(ps, policies.NewTimeout[string](cfg.Timeout, nil))
	}
	opts := append(append([]middleware.Option{}, cfg.Options...),
		middleware.WithSpanName("execute_tool "+name),
		middleware.WithAttributes(toolAttributes(name, cfg.Description)...),
	)
	t.chain = middleware.Layer[*call, string]("tool", middleware.Spec[string]{Policies: ps}, opts...)(func(ctx context.Context, c *call) (string, error) {
		return c.work(ctx, c.args)
	})
	if fn != nil {
		t.prepare = func(raw string) (Handler, error) {
			var args A
			if err := decode(raw, &args); err != nil {
				return nil, &policies.Error{Class: policies.Permanent, Type: "invalid_arguments",
					Err: fmt.Errorf("%s: the arguments are not valid: %w", name, err)}
			}
			return func(ctx context.Context, _ string) (string, error) {
				r, err := fn(ctx, args)
				if err != nil {
					return "", err
				}
				return encode(r)
			}, nil
		}
	}
	return t
}

func decode(raw string, v any) error {
	if raw == "" {
		raw = "{}"
	}
	return json.Unmarshal([]byte(raw), v)
}

func encode(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", &policies.Error{Class: policies.Programming, Type: "unencodable_result", Err: err}
	}
	return string(b), nil
}

// Name is the tool's name.
func (t *Tool) Name() string { return t.name }

// Spec is the tool as the model sees it.
func (t *Tool) Spec() session.Tool { return t.spec }

// Call runs the tool through its chain and returns its result as JSON, or
// the final error (a *policies.FailedError) for a caller that wants it.
func (t *Tool) Call(ctx context.Context, args string) (string, error) {
	if t.prepare == nil {
		return "", &policies.Error{Class: policies.Programming, Type: "no_handler",
			Err: fmt.Errorf("%s: the tool has no work of its own: call it with CallWith", t.name)}
	}
	work, err := t.prepare(args)
	if err != nil {
		return "", err
	}
	return t.CallWith(ctx, args, work)
}

// CallWith runs one call through the tool's chain with work as the call's
// work: each attempt the chain makes runs work once, on args. The tool's
// name, governance and breaker are the tool's; the work is the call's,
// carried as an argument, not in the context. It returns what Call does.
func (t *Tool) CallWith(ctx context.Context, args string, work Handler) (string, error) {
	if work == nil {
		return "", &policies.Error{Class: policies.Programming, Type: "no_handler",
			Err: fmt.Errorf("%s: CallWith without a handler", t.name)}
	}
	return t.chain(ctx, &call{args: args, work: work})
}

// Result is what the model receives from a tool call.
type Result struct {
	Content string   // the result, or {"error": {…}}
	Failure *Failure // nil on success
}

// Invoke runs the tool and returns its final result for the model: the value,
// or a structured failure that says whether and when to try again.
func (t *Tool) Invoke(ctx context.Context, args string) Result {
	out, err := t.Call(ctx, args)
	return t.result(ctx, out, err)
}

// InvokeWith is [Tool.CallWith]'s call, its final result for the model, as
// Invoke gives it.
func (t *Tool) InvokeWith(ctx context.Context, args string, work Handler) Result {
	out, err := t.CallWith(ctx, args, work)
	return t.result(ctx, out, err)
}

func (t *Tool) result(ctx context.Context, out string, err error) Result {
	if err == nil {
		return Result{Content: out}
	}
	f := t.failure(ctx, err)
	return Result{Content: f.JSON(), Failure: f}
}

// Box holds an agent's tools and answers its tool calls.
type Box struct {
	order []string
	tools map[string]*Tool
}

// NewBox returns a box of tools; a later tool of the same name replaces an
// earlier one.
func NewBox(tools ...*Tool) *Box {
	b := &Box{tools: map[string]*Tool{}}
	for _, t := range tools {
		if _, ok := b.tools[t.name]; !ok {
			b.order = append(b.order, t.name)
		}
		b.tools[t.name] = t
	}
	return b
}

// Specs lists the tools for the model.
func (b *Box) Specs() []session.Tool {
	out := make([]session.Tool, 0, len(b.order))
	for _, n := range b.order {
		out = append(out, b.tools[n].spec)
	}
	return out
}

// Tool returns the named tool.
func (b *Box) Tool(name string) (*Tool, bool) {
	t, ok := b.tools[name]
	return t, ok
}

// Invoke answers one tool call with a tool message. A call of a tool the
// box does not hold gets a structured failure too.
func (b *Box) Invoke(ctx context.Context, call session.ToolCall) session.Message {
	msg := session.Message{Role: session.ToolRole, ToolCallID: call.ID, Name: call.Name}
	t, ok := b.tools[call.Name]
	if !ok {
		f := &Failure{Class: string(policies.Permanent), Message: fmt.Sprintf("there is no tool named %q", call.Name),
			Hint: "call one of the tools offered: " + fmt.Sprint(b.order)}
		msg.Content = f.JSON()
		return msg
	}
	if call.ID != "" {
		ctx = middleware.WithCallAttributes(ctx, semconv.GenAIToolCallID.String(call.ID))
	}
	msg.Content = t.Invoke(ctx, call.Arguments).Content
	return msg
}

// toolAttributes are an execute_tool span's attributes from its start.
func toolAttributes(name, description string) []attribute.KeyValue {
	kv := []attribute.KeyValue{semconv.GenAIOperation.
		String("execute_tool"), semconv.GenAIToolName.
		String(name), semconv.GenAIToolType.
		String("function"),
	}
	if description != "" {
		kv = append(kv, semconv.GenAIToolDesc.String(description))
	}
	return kv
}
