package retraceeino

import (
	"context"

	"github.com/cloudwego/eino/adk"

	"github.com/retrace-go/retrace/middleware"
	retraceruntime "github.com/retrace-go/retrace/runtime"
)

// Agent returns a, running each run inside retrace's agent layer
// (runtime.AgentLayer: the span "invoke_agent {name}" with
// gen_ai.operation.name=invoke_agent, gen_ai.agent.name and
// gen_ai.provider.name, and MaxSteps steps), the root of the run's trace:
// its retrace.calls counts every provider request and tool call of the run,
// and its retrace.calls.worst_case and nested-retry event include eino's own
// model retry. A failed run's root is classified as the failure beneath it
// is: when eino's model retry gave up, by the last error it retried. Run
// the agent through it (adk.NewRunner(ctx, adk.RunnerConfig{Agent:
// mw.Agent(agent)})). A resumable agent stays resumable.
//
// Each run's events are forwarded as they come, by a goroutine that ends
// when the run ends.
func (h *Middleware) Agent(a adk.Agent) adk.Agent {
	w := &agent{inner: a}
	// An agent's name is fixed when it is made (ChatModelAgent ignores the
	// context it is asked with).
	name := a.Name(context.Background())
	w.layer = retraceruntime.AgentLayer[func(context.Context) *adk.AsyncIterator[*adk.AgentEvent], struct{}](
		name, h.cfg.Provider, h.cfg.MaxSteps, h.cfg.Options...)(w.drain)
	if r, ok := a.(adk.ResumableAgent); ok {
		return &resumableAgent{agent: w, inner: r}
	}
	return w
}

type agent struct {
	inner adk.Agent
	layer middleware.Handler[func(context.Context) *adk.AsyncIterator[*adk.AgentEvent], struct{}]
}

// runKey carries the generator that a run's events are forwarded to.
type runKey struct{}

func (a *agent) Name(ctx context.Context) string        { return a.inner.Name(ctx) }
func (a *agent) Description(ctx context.Context) string { return a.inner.Description(ctx) }

func (a *agent) Run(ctx context.Context, input *adk.AgentInput, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	return a.start(ctx, func(ctx context.Context) *adk.AsyncIterator[*adk.AgentEvent] {
		return a.inner.Run(ctx, input, opts...)
	})
}

// start runs one run in the agent layer, forwarding its events.
func (a *agent) start(ctx context.Context, run func(context.Context) *adk.AsyncIterator[*adk.AgentEvent]) *adk.AsyncIterator[*adk.AgentEvent] {
	iter, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
	ctx = context.WithValue(ctx, runKey{}, gen)
	go func() {
		defer gen.Close() // after the layer span has ended: a drained iterator means a finished trace
		_, _ = a.layer(ctx, run)
	}()
	return iter
}

// drain is the agent layer's handler: the run, to its last event. The run
// fails with the error of its last failed event (see runFailure); the
// events reach the caller unchanged.
func (a *agent) drain(ctx context.Context, run func(context.Context) *adk.AsyncIterator[*adk.AgentEvent]) (struct{}, error) {
	gen, _ := ctx.Value(runKey{}).(*adk.AsyncGenerator[*adk.AgentEvent])
	var err error
	for it := run(ctx); ; {
		ev, ok := it.Next()
		if !ok {
			return struct{}{}, runFailure(err)
		}
		if ev != nil && ev.Err != nil {
			err = ev.Err
		}
		gen.Send(ev)
	}
}

type resumableAgent struct {
	*agent
	inner adk.ResumableAgent
}

func (a *resumableAgent) Resume(ctx context.Context, info *adk.ResumeInfo, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	return a.start(ctx, func(ctx context.Context) *adk.AsyncIterator[*adk.AgentEvent] {
		return a.inner.Resume(ctx, info, opts...)
	})
}
