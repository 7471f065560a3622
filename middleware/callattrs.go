package middleware

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// callAttrs are attributes for the span of the next layer call made with a
// context: the layer call whose parent frame is the one they were set in.
type callAttrs struct {
	in    *frame // the frame the attributes were set in; nil outside any layer
	attrs []attribute.KeyValue
}

type callAttrsKey struct{}

// WithCallAttributes returns a context whose next layer call carries kv on
// its span from the start, so that a sampler sees them: what one call is
// about, such as the tool call's ID (gen_ai.tool.call.id), where the layer's
// own attributes ([WithAttributes]) are the same for every call. Layers
// called beneath that one do not inherit them.
func WithCallAttributes(ctx context.Context, kv ...attribute.KeyValue) context.Context {
	if len(kv) == 0 {
		return ctx
	}
	return context.WithValue(ctx, callAttrsKey{}, &callAttrs{in: frameFrom(ctx), attrs: kv})
}

// withCallAttrs adds to opts the call attributes meant for a layer call
// whose parent frame is parent.
func withCallAttrs(ctx context.Context, parent *frame, opts []trace.SpanStartOption) []trace.SpanStartOption {
	ca, ok := ctx.Value(callAttrsKey{}).(*callAttrs)
	if !ok || ca.in != parent {
		return opts
	}
	return append(append(make([]trace.SpanStartOption, 0, len(opts)+1), opts...), trace.WithAttributes(ca.attrs...))
}
