package retracemcp

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/retrace-go/retrace/internal/instrument"
	"github.com/retrace-go/retrace/policies"
)

// scope is the instrumentation scope of contrib/mcp's spans and metrics.
const scope = "github.com/retrace-go/retrace/contrib/mcp"

var meterOpts = []metric.MeterOption{metric.WithInstrumentationVersion(instrument.Version), metric.WithSchemaURL(instrument.SchemaURL)}

// clientMetrics are the client's MCP metrics; an instrument the meter
// refuses stays nil, and metrics never fail a call.
type clientMetrics struct {
	ops      metric.Float64Histogram
	sessions metric.Float64Histogram
}

func newClientMetrics(mp metric.MeterProvider) *clientMetrics {
	m := mp.Meter(scope, meterOpts...)
	cm := &clientMetrics{}
	cm.ops, _ = m.Float64Histogram(metricClientOperationDuration, metric.WithUnit(instrument.UnitSeconds),
		metric.WithDescription("The duration of an MCP request as the client sent it, until its answer."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	cm.sessions, _ = m.Float64Histogram(metricClientSessionDuration, metric.WithUnit(instrument.UnitSeconds),
		metric.WithDescription("The duration of an MCP client session."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	return cm
}

// operation records one request's duration.
func (m *clientMetrics) operation(ctx context.Context, d time.Duration, r *request, n *note, err error) {
	if m.ops == nil {
		return
	}
	kv := append(requestAttributes(r.method, r.req), n.attributes()...)
	kv = append(kv, errorAttributes(err)...)
	m.ops.Record(ctx, d.Seconds(), metric.WithAttributeSet(attribute.NewSet(kv...)))
}

// session records a session's duration when it ended.
func (m *clientMetrics) session(d time.Duration, cs *mcp.ClientSession, err error) {
	if m.sessions == nil {
		return
	}
	var kv []attribute.KeyValue
	if init := cs.InitializeResult(); init != nil && init.ProtocolVersion != "" {
		kv = append(kv, keyProtocolVersion.String(init.ProtocolVersion))
	}
	if err != nil && !errors.Is(err, mcp.ErrConnectionClosed) {
		kv = append(kv, semconv.ErrorTypeKey.String(metricErrorType(policies.Classify(err).Type)))
	}
	m.sessions.Record(context.Background(), d.Seconds(), metric.WithAttributeSet(attribute.NewSet(kv...)))
}

// requestAttributes are a request's attributes that a metric carries: the
// method, the tool, the protocol version.
func requestAttributes(method string, req mcp.Request) []attribute.KeyValue {
	kv := []attribute.KeyValue{keyMethodName.String(method)}
	if method == methodToolsCall {
		kv = append(kv, semconv.GenAIOperationNameKey.String("execute_tool"))
		if t := toolName(req); t != "" {
			kv = append(kv, semconv.GenAIToolNameKey.String(t))
		}
	}
	if v := protocolVersion(req); v != "" {
		kv = append(kv, keyProtocolVersion.String(v))
	}
	return kv
}

// errorAttributes are a failed request's error.type, bounded for a metric,
// and its JSON-RPC code.
func errorAttributes(err error) []attribute.KeyValue {
	if err == nil {
		return nil
	}
	kv := []attribute.KeyValue{semconv.ErrorTypeKey.String(metricErrorType(policies.Classify(err).Type))}
	if e, ok := errors.AsType[*RPCError](err); ok {
		kv = append(kv, keyRPCStatusCode.String(e.ErrorType()))
	}
	return kv
}

// mcpErrorTypes are the error types of MCP a metric keeps as they are,
// besides retrace's own (instrument.MetricErrorType): a metric stream per
// code an implementation invents would grow without bound.
var mcpErrorTypes = map[string]bool{
	errorTypeToolError: true,
	"-32700":           true, "-32600": true, "-32601": true, "-32602": true, "-32603": true,
	"-32002": true, "-32020": true, "-32021": true, "-32022": true, "-32042": true,
}

func metricErrorType(t string) string {
	if mcpErrorTypes[t] {
		return t
	}
	return instrument.MetricErrorType(t)
}

// protocolVersion is the protocol version of a request's session, "" before
// it is known.
func protocolVersion(req mcp.Request) string {
	switch s := req.GetSession().(type) {
	case *mcp.ClientSession:
		if s != nil {
			if init := s.InitializeResult(); init != nil {
				return init.ProtocolVersion
			}
		}
	case *mcp.ServerSession:
		if s != nil {
			if init := s.InitializeParams(); init != nil {
				return init.ProtocolVersion
			}
		}
	}
	if p := req.GetParams(); !isNil(p) {
		if v, ok := p.GetMeta()["io.modelcontextprotocol/protocolVersion"].(string); ok {
			return v
		}
	}
	return ""
}
