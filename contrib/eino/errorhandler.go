package retraceeino

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/cloudwego/eino/adk"
	einotool "github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/schema"

	"github.com/retrace-go/retrace/policies"
)

// ErrSwallowedErrors is what a run fails with (errors.Is) when one of its
// tools is wrapped with eino's utils.WrapToolWithErrorHandler: that wrapper
// turns the tool's errors into results before any middleware sees them, so
// every failed call would reach retrace as a success, retried never,
// counted by no breaker, and traced as a success. Wrap the tool with
// [WrapToolWithErrorHandler] instead, or not at all: under the middleware a
// tool's final failure already reaches the model as a result.
var ErrSwallowedErrors = errors.New("retraceeino: the tool's errors are turned into results before retrace can see them")

// WrapToolWithErrorHandler is eino's utils.WrapToolWithErrorHandler for
// tools governed by a [Middleware]: the tool it returns is invokable,
// streamable or both, as t is, and turns an error of t into the text h
// makes of it (a stream of that one text), an eino interrupt excepted.
//
// Under the middleware the wrapper steps aside: the agent runs t itself, so
// that each failure reaches retrace's governance (classification, retries,
// the breaker, the spans), and h is called once, with the call's final
// error (a layer's *policies.Error, through which
// errors.As sees t's own error), to make the text the model reads instead
// of retrace's tool.Failure. Elsewhere it is eino's wrapper.
func WrapToolWithErrorHandler(t einotool.BaseTool, h utils.ErrorHandler) einotool.BaseTool {
	base := &handledTool{inner: t, h: h}
	inv, isInv := t.(einotool.InvokableTool)
	str, isStr := t.(einotool.StreamableTool)
	switch {
	case isInv && isStr:
		return &handledBoth{handledTool: base, inv: inv, str: str}
	case isInv:
		return &handledInvokable{handledTool: base, inv: inv}
	case isStr:
		return &handledStreamable{handledTool: base, str: str}
	}
	return t
}

// handledTool is a tool with an error handler, as WrapToolWithErrorHandler
// made it.
type handledTool struct {
	inner einotool.BaseTool
	h     utils.ErrorHandler
}

func (t *handledTool) Info(ctx context.Context) (*schema.ToolInfo, error) { return t.inner.Info(ctx) }

// unwrap returns the tool and its handler, for the middleware.
func (t *handledTool) unwrap() (einotool.BaseTool, utils.ErrorHandler) { return t.inner, t.h }

// invoke is eino's error handling of an invokable tool.
func (t *handledTool) invoke(ctx context.Context, run func(context.Context, string, ...einotool.Option) (string, error), args string, opts []einotool.Option) (string, error) {
	out, err := run(ctx, args, opts...)
	if err == nil || isInterrupt(err) {
		return out, err
	}
	return t.h(ctx, err), nil
}

// stream is eino's error handling of a streamable tool.
func (t *handledTool) stream(ctx context.Context, run func(context.Context, string, ...einotool.Option) (*schema.StreamReader[string], error), args string, opts []einotool.Option) (*schema.StreamReader[string], error) {
	sr, err := run(ctx, args, opts...)
	if err == nil || isInterrupt(err) {
		return sr, err
	}
	return schema.StreamReaderFromArray([]string{t.h(ctx, err)}), nil
}

type handledInvokable struct {
	*handledTool
	inv einotool.InvokableTool
}

func (t *handledInvokable) InvokableRun(ctx context.Context, args string, opts ...einotool.Option) (string, error) {
	return t.invoke(ctx, t.inv.InvokableRun, args, opts)
}

type handledStreamable struct {
	*handledTool
	str einotool.StreamableTool
}

func (t *handledStreamable) StreamableRun(ctx context.Context, args string, opts ...einotool.Option) (*schema.StreamReader[string], error) {
	return t.stream(ctx, t.str.StreamableRun, args, opts)
}

type handledBoth struct {
	*handledTool
	inv einotool.InvokableTool
	str einotool.StreamableTool
}

func (t *handledBoth) InvokableRun(ctx context.Context, args string, opts ...einotool.Option) (string, error) {
	return t.invoke(ctx, t.inv.InvokableRun, args, opts)
}

func (t *handledBoth) StreamableRun(ctx context.Context, args string, opts ...einotool.Option) (*schema.StreamReader[string], error) {
	return t.stream(ctx, t.str.StreamableRun, args, opts)
}

// handlersKey carries a run's error handlers, by tool name, from
// BeforeAgent to the tool calls.
type handlersKey struct{}

// errorHandlerFor returns the error handler of the run's tool of that
// name, or nil.
func errorHandlerFor(ctx context.Context, name string) utils.ErrorHandler {
	hs, _ := ctx.Value(handlersKey{}).(map[string]utils.ErrorHandler)
	return hs[name]
}

// BeforeAgent prepares each run's tools for governance. A tool wrapped
// with [WrapToolWithErrorHandler] is replaced by the tool it wraps, its
// handler kept for the run's calls of it. A tool wrapped with eino's
// utils.WrapToolWithErrorHandler fails the run at its start with
// [ErrSwallowedErrors], naming the tool: its errors never leave it, so
// governing it would be a pretence. (A wrapper of eino's wrapper, of a
// type of the user's, cannot be seen through, and is not refused.)
func (h *Middleware) BeforeAgent(ctx context.Context, rc *adk.ChatModelAgentContext) (context.Context, *adk.ChatModelAgentContext, error) {
	if rc == nil {
		return ctx, rc, nil
	}
	var handlers map[string]utils.ErrorHandler
	tools := slices.Clone(rc.Tools)
	for i, t := range tools {
		if ht, ok := t.(interface {
			unwrap() (einotool.BaseTool, utils.ErrorHandler)
		}); ok {
			info, err := t.Info(ctx)
			if err != nil {
				return ctx, rc, err
			}
			inner, handle := ht.unwrap()
			if handlers == nil {
				handlers = map[string]utils.ErrorHandler{}
			}
			handlers[info.Name] = handle
			tools[i], t = inner, inner
		}
		if h.swallowing[reflect.TypeOf(t)] {
			return ctx, rc, &policies.Error{Class: policies.Programming, Type: "swallowed_errors",
				Err: fmt.Errorf("%w: tool %s is wrapped with eino's utils.WrapToolWithErrorHandler; wrap it with retraceeino.WrapToolWithErrorHandler, or not at all",
					ErrSwallowedErrors, toolName(ctx, t))}
		}
	}
	rc.Tools = tools
	if handlers == nil && ctx.Value(handlersKey{}) == nil {
		return ctx, rc, nil
	}
	// A run's handlers are its own: an agent run inside another's tool call
	// does not inherit the outer run's.
	return context.WithValue(ctx, handlersKey{}, handlers), rc, nil
}

// toolName is t's name for an error message, or its type when its info
// cannot be had.
func toolName(ctx context.Context, t einotool.BaseTool) string {
	if info, err := t.Info(ctx); err == nil && info != nil {
		return fmt.Sprintf("%q", info.Name)
	}
	return fmt.Sprintf("of type %T", t)
}

// swallowingTypes are the types of the tools eino's
// utils.WrapToolWithErrorHandler and its two variants return, learnt from
// the wrappers themselves, so that no name of eino's unexported types is
// relied on.
func swallowingTypes() map[reflect.Type]bool {
	h := func(context.Context, error) string { return "" }
	return map[reflect.Type]bool{
		reflect.TypeOf(utils.WrapToolWithErrorHandler(probeTool{}, h)):                 true,
		reflect.TypeOf(utils.WrapToolWithErrorHandler(probeInvokable{}, h)):            true,
		reflect.TypeOf(utils.WrapToolWithErrorHandler(probeStreamable{}, h)):           true,
		reflect.TypeOf(utils.WrapInvokableToolWithErrorHandler(probeInvokable{}, h)):   true,
		reflect.TypeOf(utils.WrapStreamableToolWithErrorHandler(probeStreamable{}, h)): true,
	}
}

// probeInvokable, probeStreamable and probeTool (both) are never run: they
// only show swallowingTypes what eino's wrappers make of each kind of tool.
type probeInvokable struct{}

func (probeInvokable) Info(context.Context) (*schema.ToolInfo, error) { return &schema.ToolInfo{}, nil }
func (probeInvokable) InvokableRun(context.Context, string, ...einotool.Option) (string, error) {
	return "", nil
}

type probeStreamable struct{}

func (probeStreamable) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{}, nil
}
func (probeStreamable) StreamableRun(context.Context, string, ...einotool.Option) (*schema.StreamReader[string], error) {
	return nil, nil
}

type probeTool struct {
	probeInvokable
}

func (probeTool) StreamableRun(context.Context, string, ...einotool.Option) (*schema.StreamReader[string], error) {
	return nil, nil
}
