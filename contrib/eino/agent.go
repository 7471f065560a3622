package retraceeino

import (
	"context"

	"github.com/cloudwego/eino/adk"

	"github.com/retrace-go/retrace/middleware"
)

// Agent returns a that runs each run inside retrace's agent layer (an
// "invoke_agent" span with MaxSteps steps), the root of the run's trace:
// its retrace.calls counts every provider request and tool call of the run,
// and its retrace.calls.worst_case and nested-retry event include eino's own
// model retry. Run the agent through it (adk.NewRunner(ctx,
// adk.RunnerConfig{Agent: mw.Agent(agent)})). A resumable agent stays
// resumable.
//
// Each run's events are forwarded as they come, by a goroutine that ends
// when the run ends.
func (h *Middleware) Agent(a adk.Agent) adk.Agent {
	w := &agent{inner: a}
	opts := append([]middleware.Option{middleware.WithSpanName("invoke_agent"), middleware.WithSteps(h.cfg.MaxSteps)}, h.cfg.Options...)
	w.layer = middleware.PoliciesWith[func(context.Context) *adk.AsyncIterator[*adk.AgentEvent], struct{}]("agent", opts)(w.drain)
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
// fails with the error of its last failed event.
func (a *agent) drain(ctx context.Context, run func(context.Context) *adk.AsyncIterator[*adk.AgentEvent]) (struct{}, error) {
	gen, _ := ctx.Value(runKey{}).(*adk.AsyncGenerator[*adk.AgentEvent])
	var err error
	for it := run(ctx); ; {
		ev, ok := it.Next()
		if !ok {
			return struct{}{}, err
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
