package retracemcp

import (
	"context"
	"maps"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// The trace context crosses the process boundary in each request's
// params._meta, as the MCP conventions ask (SEP-414): the W3C keys
// traceparent, tracestate and baggage, unprefixed. The transport's own
// context (HTTP headers) is not used: one HTTP request may carry several MCP
// messages, and one MCP request several HTTP requests.

// w3c is the propagation used when none is configured.
var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// propagator is p, else the global propagator when one is set (the
// default one has no fields), else W3C trace context and baggage.
func propagator(p propagation.TextMapPropagator) propagation.TextMapPropagator {
	if p != nil {
		return p
	}
	if g := otel.GetTextMapPropagator(); len(g.Fields()) > 0 {
		return g
	}
	return w3c
}

// metaCarrier is a params._meta map as a propagation carrier.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// inject writes ctx's trace context into the request's params._meta. The
// params get a new map: the caller's is never written to, as a request
// retried or made again with the same params must not carry an old span.
func inject(ctx context.Context, p propagation.TextMapPropagator, params mcp.Params) {
	if isNil(params) {
		return
	}
	m := metaCarrier(maps.Clone(params.GetMeta()))
	if m == nil {
		m = metaCarrier{}
	}
	propagator(p).Inject(ctx, m)
	if len(m) > 0 {
		params.SetMeta(m)
	}
}

// extract reads the trace context a request's params._meta carries.
func extract(ctx context.Context, p propagation.TextMapPropagator, params mcp.Params) context.Context {
	if isNil(params) {
		return ctx
	}
	return propagator(p).Extract(ctx, metaCarrier(params.GetMeta()))
}

// isNil reports whether params holds no value: a nil interface or a nil
// pointer, whose methods would dereference it.
func isNil(params mcp.Params) bool {
	if params == nil {
		return true
	}
	v := reflect.ValueOf(params)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
