package retraceeino

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/cloudwego/eino/adk"
	einotool "github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/tool"
)

// Every kind of tool eino runs (invokable, streamable, and their enhanced
// variants) goes through the same governance: the tool's retrace tool (one
// per name, so that its breaker outlives the call), whose handler makes one
// attempt of the eino endpoint. A stream is read to its end inside the
// attempt, as the model's is, so that a stream that fails midway is a
// failed attempt that can be retried, and the agent gets its chunks once
// the call succeeded. A call that fails for good hands the model the
// structured failure of tool.Failure as the tool's result (or, for a tool
// wrapped with [WrapToolWithErrorHandler], its handler's text), so that the
// agent reads what to do instead of its run ending. An eino interrupt is
// passed through as it is.

// WrapInvokableToolCall governs an invokable tool's calls.
func (h *Middleware) WrapInvokableToolCall(_ context.Context, endpoint adk.InvokableToolCallEndpoint, tCtx *adk.ToolContext) (adk.InvokableToolCallEndpoint, error) {
	if tCtx == nil {
		return endpoint, nil
	}
	return func(ctx context.Context, args string, opts ...einotool.Option) (string, error) {
		out, _, err := h.govern(ctx, tCtx, args, func(ctx context.Context, args string) (string, error) {
			return endpoint(ctx, args, opts...)
		})
		return out, err
	}, nil
}

// WrapStreamableToolCall governs a streamable tool's calls: each attempt
// reads the stream to its end.
func (h *Middleware) WrapStreamableToolCall(_ context.Context, endpoint adk.StreamableToolCallEndpoint, tCtx *adk.ToolContext) (adk.StreamableToolCallEndpoint, error) {
	if tCtx == nil {
		return endpoint, nil
	}
	return func(ctx context.Context, args string, opts ...einotool.Option) (*schema.StreamReader[string], error) {
		var chunks []string // the attempt that succeeded's
		out, failed, err := h.govern(ctx, tCtx, args, func(ctx context.Context, args string) (string, error) {
			sr, err := endpoint(ctx, args, opts...)
			if err != nil {
				return "", err
			}
			chunks, err = readStream(sr)
			return "", err
		})
		switch {
		case err != nil:
			return nil, err
		case failed:
			return schema.StreamReaderFromArray([]string{out}), nil
		}
		return schema.StreamReaderFromArray(chunks), nil
	}, nil
}

// WrapEnhancedInvokableToolCall governs an enhanced invokable tool's calls.
func (h *Middleware) WrapEnhancedInvokableToolCall(_ context.Context, endpoint adk.EnhancedInvokableToolCallEndpoint, tCtx *adk.ToolContext) (adk.EnhancedInvokableToolCallEndpoint, error) {
	if tCtx == nil {
		return endpoint, nil
	}
	return func(ctx context.Context, arg *schema.ToolArgument, opts ...einotool.Option) (*schema.ToolResult, error) {
		var result *schema.ToolResult // the attempt that succeeded's
		out, failed, err := h.govern(ctx, tCtx, argumentText(arg), func(ctx context.Context, args string) (string, error) {
			r, err := endpoint(ctx, withText(arg, args), opts...)
			result = r
			return "", err
		})
		switch {
		case err != nil:
			return nil, err
		case failed:
			return textResult(out), nil
		}
		return result, nil
	}, nil
}

// WrapEnhancedStreamableToolCall governs an enhanced streamable tool's
// calls: each attempt reads the stream to its end.
func (h *Middleware) WrapEnhancedStreamableToolCall(_ context.Context, endpoint adk.EnhancedStreamableToolCallEndpoint, tCtx *adk.ToolContext) (adk.EnhancedStreamableToolCallEndpoint, error) {
	if tCtx == nil {
		return endpoint, nil
	}
	return func(ctx context.Context, arg *schema.ToolArgument, opts ...einotool.Option) (*schema.StreamReader[*schema.ToolResult], error) {
		var chunks []*schema.ToolResult // the attempt that succeeded's
		out, failed, err := h.govern(ctx, tCtx, argumentText(arg), func(ctx context.Context, args string) (string, error) {
			sr, err := endpoint(ctx, withText(arg, args), opts...)
			if err != nil {
				return "", err
			}
			chunks, err = readStream(sr)
			return "", err
		})
		switch {
		case err != nil:
			return nil, err
		case failed:
			return schema.StreamReaderFromArray([]*schema.ToolResult{textResult(out)}), nil
		}
		return schema.StreamReaderFromArray(chunks), nil
	}, nil
}

// govern runs one tool call through its tool's governance, attempt being
// one call of the eino endpoint. It returns the text for the model (the
// tool's output, or, when failed, the failure), or the eino interrupt that
// paused the call.
func (h *Middleware) govern(ctx context.Context, tCtx *adk.ToolContext, args string, attempt func(context.Context, string) (string, error)) (out string, failed bool, interrupt error) {
	t := h.tool(tCtx.Name)
	if tCtx.CallID != "" {
		ctx = middleware.WithCallAttributes(ctx, semconv.GenAIToolCallIDKey.String(tCtx.CallID))
	}
	// work is one attempt: one call of the eino endpoint (a kind of tool
	// whose result is not a string keeps it where its wrapper reads it).
	// An eino interrupt is not a failure: eino pauses the run. It is not
	// retried, not counted by the breaker, and returned to eino unchanged.
	work := func(ctx context.Context, args string) (string, error) {
		out, err := attempt(ctx, args)
		if err != nil && isInterrupt(err) {
			interrupt = err
			return "", &policies.Error{Class: policies.Canceled, Type: "eino_interrupt", Err: err}
		}
		return out, err
	}
	if handle := errorHandlerFor(ctx, tCtx.Name); handle != nil {
		out, err := t.CallWith(ctx, args, work)
		switch {
		case interrupt != nil:
			return "", false, interrupt
		case err != nil:
			return handle(ctx, err), true, nil
		}
		return out, false, nil
	}
	res := t.InvokeWith(ctx, args, work)
	if interrupt != nil {
		return "", false, interrupt
	}
	return res.Content, res.Failure != nil, nil
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
	t := tool.New[json.RawMessage, string](name, nil, cfg) // each call brings its endpoint
	h.tools[name] = t
	return t
}

func isInterrupt(err error) bool {
	if _, ok := compose.ExtractInterruptInfo(err); ok {
		return true
	}
	_, ok := compose.IsInterruptRerunError(err)
	return ok
}

// readStream reads a tool's stream to its end and closes it; a stream that
// breaks returns its error and no chunks.
func readStream[T any](sr *schema.StreamReader[T]) ([]T, error) {
	defer sr.Close()
	var chunks []T
	for {
		c, err := sr.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, nil
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, c)
	}
}

func argumentText(arg *schema.ToolArgument) string {
	if arg == nil {
		return ""
	}
	return arg.Text
}

// withText is arg with its arguments' text replaced.
func withText(arg *schema.ToolArgument, text string) *schema.ToolArgument {
	a := schema.ToolArgument{}
	if arg != nil {
		a = *arg
	}
	a.Text = text
	return &a
}

// textResult is an enhanced tool's result of one text part.
func textResult(text string) *schema.ToolResult {
	return &schema.ToolResult{Parts: []schema.ToolOutputPart{{Type: schema.ToolPartTypeText, Text: text}}}
}
