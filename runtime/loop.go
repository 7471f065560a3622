package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

// Conversation is what an agent loop talks to: a *session.Session.
//
// Its contract, which the loop relies on: a Run or Continue that fails
// leaves the history as it was before the call (the failed turn's messages
// are not kept), so that the loop, or a runtime retrying it, starts the next
// turn clean.
type Conversation interface {
	Run(ctx context.Context, prompt string) (session.Message, error)
	Continue(ctx context.Context) (session.Message, error)
	Append(msgs ...session.Message)
}

// Tools answers a model's tool calls: a *tool.Box.
type Tools interface {
	Invoke(ctx context.Context, call session.ToolCall) session.Message
}

// DefaultMaxSteps bounds an agent loop's model turns: the last cost
// boundary when nothing else stops a task.
const DefaultMaxSteps = 40

// Loop is a tool-using agent: the model's turn, the tools it asks for, and
// again, until the model answers or the loop reaches MaxSteps, the last cost
// boundary (it does not replace error handling; it bounds what is left).
type Loop struct {
	Session  Conversation
	Tools    Tools
	MaxSteps int // model turns; 0 → DefaultMaxSteps
	// Name is the agent's name (gen_ai.agent.name; the span is named
	// "invoke_agent {Name}"); empty → none.
	Name string
	// Options configure the loop's span (retrace.layer=agent).
	Options []middleware.Option

	once sync.Once
	run  middleware.Handler[string, LoopResult]
}

// LoopResult is how a loop went.
type LoopResult struct {
	Answer    session.Message // the model's last message
	Steps     int             // model turns
	ToolCalls int             // tool calls answered
}

// ErrStepLimit is matched (errors.Is) by a loop that reached its step
// limit. It is Fatal: no layer above retries a task that used up its steps.
var ErrStepLimit = &policies.Error{Class: policies.Fatal, Type: "step_limit", Err: errors.New("the agent loop reached its step limit")}

// ErrLoopConfig is matched (errors.Is) by a loop that cannot start: its
// Session or Tools is missing. It is Programming: a bug in the caller,
// never retried.
var ErrLoopConfig = errors.New("runtime: agent loop misconfigured")

// Run runs the loop on prompt. A loop without a Session or Tools refuses to
// start, with an error that matches ErrLoopConfig.
func (l *Loop) Run(ctx context.Context, prompt string) (LoopResult, error) {
	switch {
	case l.Session == nil:
		return LoopResult{}, &policies.Error{Class: policies.Programming, Type: "loop_config",
			Err: fmt.Errorf("%w: Loop.Session is nil", ErrLoopConfig)}
	case l.Tools == nil:
		return LoopResult{}, &policies.Error{Class: policies.Programming, Type: "loop_config",
			Err: fmt.Errorf("%w: Loop.Tools is nil (use tool.NewBox() for a loop without tools)", ErrLoopConfig)}
	}
	l.once.Do(func() { l.run = l.agentLayer()(l.loop) })
	return l.run(ctx, prompt)
}

// agentLayer is the loop's layer ([AgentLayer]), with the provider when
// the conversation says which.
func (l *Loop) agentLayer() middleware.Middleware[string, LoopResult] {
	var provider string
	if p, ok := l.Session.(interface{ ProviderName() string }); ok {
		provider = p.ProviderName()
	}
	return AgentLayer[string, LoopResult](l.Name, provider, l.maxSteps(), l.Options...)
}

// AgentLayer is the layer of one agent invocation, whoever runs the agent
// (a Loop, an agent framework's adapter): layer "agent", the span
// "invoke_agent {name}" ("invoke_agent" when name is empty) with
// gen_ai.operation.name=invoke_agent, gen_ai.agent.name and
// gen_ai.provider.name when they are known, and a worst case of maxSteps
// times the costliest step (mark each step with middleware.NextStep).
// Outermost, it is the root of the run's trace, whose retrace.calls counts
// every model request and tool attempt of the run.
func AgentLayer[Req, Resp any](name, provider string, maxSteps int, opts ...middleware.Option) middleware.Middleware[Req, Resp] {
	span := "invoke_agent"
	kv := []attribute.KeyValue{semconv.GenAIOperation.String("invoke_agent")}
	if name != "" {
		span += " " + name
		kv = append(kv, semconv.GenAIAgentName.String(name))
	}
	if provider != "" {
		kv = append(kv, semconv.GenAIProvider.String(provider))
	}
	all := append([]middleware.Option{middleware.WithSpanName(span), middleware.WithAttributes(kv...)}, opts...)
	if maxSteps > 0 {
		all = append(all, middleware.WithSteps(maxSteps))
	}
	return middleware.Layer[Req, Resp]("agent", middleware.Spec[Resp]{}, all...)
}

func (l *Loop) maxSteps() int {
	if l.MaxSteps <= 0 {
		return DefaultMaxSteps
	}
	return l.MaxSteps
}

func (l *Loop) loop(ctx context.Context, prompt string) (LoopResult, error) {
	maxSteps := l.maxSteps()
	var res LoopResult
	for step := 1; ; step++ {
		middleware.NextStep(ctx) // the worst case counts the costliest step, MaxSteps times
		var (
			msg session.Message
			err error
		)
		if step == 1 {
			msg, err = l.Session.Run(ctx, prompt)
		} else {
			msg, err = l.Session.Continue(ctx)
		}
		res.Steps, res.Answer = step, msg
		if err != nil {
			return res, err
		}
		if len(msg.ToolCalls) == 0 {
			return res, nil
		}
		for _, call := range msg.ToolCalls {
			l.Session.Append(l.Tools.Invoke(ctx, call))
			res.ToolCalls++
		}
		if step >= maxSteps {
			return res, stepLimit(maxSteps, res.ToolCalls)
		}
	}
}

// stepLimit is a loop that reached maxSteps without an answer: it ends the
// loop's layer, and every layer above, with outcome step_limit, and matches
// ErrStepLimit.
func stepLimit(maxSteps, toolCalls int) error {
	return &policies.Error{Class: policies.Fatal, Type: "step_limit", Reason: "step limit", Outcome: telemetry.OutcomeStepLimit,
		Err: fmt.Errorf("%w of %d turns (%d tool calls) without an answer", ErrStepLimit, maxSteps, toolCalls)}
}
