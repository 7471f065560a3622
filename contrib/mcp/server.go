package retracemcp

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/policies"
)

// ServerConfig configures [ServerMiddleware]. The zero value traces on the
// global tracer provider, records on the global meter provider, and reads
// W3C trace context and baggage from params._meta.
type ServerConfig struct {
	TracerProvider trace.TracerProvider // nil → the global one, at call time
	MeterProvider  metric.MeterProvider // nil → the global one
	// Propagator reads the trace context from each request's params._meta;
	// nil → the global propagator when one is set, else W3C trace context
	// and baggage.
	Propagator propagation.TextMapPropagator
	// Secrets are redacted by exact value from the text of every failed
	// tool result the server sends, and from its spans, besides the
	// patterns retrace redacts everywhere.
	Secrets []string
}

// ServerMiddleware is the receiving middleware of a Go MCP server that
// joins its callers' traces:
//
//	server.AddReceivingMiddleware(retracemcp.ServerMiddleware(retracemcp.ServerConfig{}))
//
// Each request it receives is a span of kind SERVER named "{method}"
// ("tools/call {tool}"), whose parent is the span the trace context in the
// request's params._meta names (the client's request span, in the client's
// trace); a trace context the server's transport already carried (an
// instrumented HTTP handler's) is linked. Its handlers, and the spans they
// start, run in that span. A tool's failed result (isError) has its text
// redacted before it is sent, and its error.type is the one the result's
// [MetaKeyError] gives, else tool_error; a JSON-RPC error's is its code.
// Each request is recorded in mcp.server.operation.duration.
func ServerMiddleware(cfg ServerConfig) mcp.Middleware {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	ops, _ := mp.Meter(scope, meterOpts...).Float64Histogram(metricServerOperationDuration,
		metric.WithUnit(instrument.UnitSeconds),
		metric.WithDescription("The duration of an MCP request as the server handled it."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			start := time.Now()
			tp := cfg.TracerProvider
			if tp == nil {
				tp = otel.GetTracerProvider()
			}
			ambient := trace.SpanContextFromContext(ctx)
			parent := extract(ctx, cfg.Propagator, req.GetParams())
			kv := append(requestAttributes(method, req), serverAttributes(req)...)
			opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(kv...)}
			if ambient.IsValid() && !ambient.Equal(trace.SpanContextFromContext(parent)) {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: ambient}))
			}
			name := method
			if t := toolName(req); t != "" {
				name += " " + t
			}
			ctx, span := tp.Tracer(scope, trace.WithInstrumentationVersion(instrument.Version), trace.WithSchemaURL(instrument.SchemaURL)).
				Start(parent, name, opts...)
			defer span.End()
			ctx = policies.WithSecrets(ctx, cfg.Secrets...)

			res, err := next(ctx, method, req)
			var failed []attribute.KeyValue
			switch {
			case err != nil:
				typ, msg := errorTypeOf(err), redact.Text(err.Error(), cfg.Secrets, 0)
				failed = append(failed, semconv.ErrorTypeKey.String(typ))
				if _, ok := errors.AsType[*jsonrpc.Error](err); ok {
					failed = append(failed, keyRPCStatusCode.String(typ))
				}
				span.SetStatus(codes.Error, msg)
			case isToolError(res):
				r := redacted(res.(*mcp.CallToolResult), cfg.Secrets)
				res = r
				typ := errorTypeToolError
				if c, ok := metaClass(r.Meta); ok {
					typ = c.Type
				}
				failed = append(failed, semconv.ErrorTypeKey.String(typ))
				span.SetStatus(codes.Error, Text(r))
			}
			span.SetAttributes(failed...)
			if ops != nil {
				mkv := kv
				for _, a := range failed {
					if a.Key == semconv.ErrorTypeKey {
						a = semconv.ErrorTypeKey.String(metricErrorType(a.Value.AsString()))
					}
					mkv = append(mkv, a)
				}
				ops.Record(ctx, time.Since(start).Seconds(), metric.WithAttributeSet(attribute.NewSet(mkv...)))
			}
			return res, err
		}
	}
}

// serverAttributes are what the server knows of a request's session and
// transport: a request that came with HTTP headers came over Streamable
// HTTP (or SSE), one without over a pipe (stdio).
func serverAttributes(req mcp.Request) []attribute.KeyValue {
	var kv []attribute.KeyValue
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		if id := ss.ID(); id != "" {
			kv = append(kv, keySessionID.String(id))
		}
	}
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		kv = append(kv, keyNetworkTransport.String(transportTCP), keyNetworkProtocolName.String("http"))
	} else {
		kv = append(kv, keyNetworkTransport.String(transportPipe))
	}
	return kv
}

// errorTypeOf is a handler's error's error.type: its JSON-RPC code, else
// retrace's.
func errorTypeOf(err error) string {
	if w, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return (&RPCError{Code: w.Code}).ErrorType()
	}
	return policies.Classify(err).Type
}

func isToolError(res mcp.Result) bool {
	r, ok := res.(*mcp.CallToolResult)
	return ok && r != nil && r.IsError
}

// redacted is a failed tool result with its text redacted, for sending: a
// copy, as the handler may keep its result.
func redacted(r *mcp.CallToolResult, secrets []string) *mcp.CallToolResult {
	cp := *r
	cp.Content = make([]mcp.Content, len(r.Content))
	for i, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			tc := *t
			tc.Text = redact.Text(t.Text, secrets, 0)
			c = &tc
		}
		cp.Content[i] = c
	}
	return &cp
}

// ToolError is the result of a tool call that failed with err, for a Go MCP
// server's tool handler: isError, err's text (with the secret patterns
// redacted), and err's classification in _meta ([MetaKeyError]), which a
// retracemcp client reads as the tool's own, so that the failure means on
// the client what it would for a Go tool there: a *policies.Error with
// status 429 is transient, waits its Retry-After, and counts toward the
// tool's breaker.
//
//	return retracemcp.ToolError(err), nil, nil
func ToolError(err error) *mcp.CallToolResult {
	if err == nil {
		err = errors.New("the tool failed without saying why")
	}
	cl := policies.Classify(err)
	w := wireClass{Class: string(cl.Class), Type: safeType(cl.Type), RetryAfterMs: cl.RetryAfter.Milliseconds()}
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: redact.Text(err.Error(), nil, 0)}},
		Meta:    mcp.Meta{MetaKeyError: w},
	}
}
