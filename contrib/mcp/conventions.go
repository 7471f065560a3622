package retracemcp

import semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

// The names of the Model Context Protocol on this adapter's spans and
// metrics, as the OpenTelemetry GenAI conventions for MCP name them
// (docs/gen-ai/mcp.md): a CLIENT span per request the client sends
// ("tools/call {gen_ai.tool.name}"), a SERVER span per request a server
// receives. They are declared here, unexported, rather than in the core's
// package telemetry: only this adapter writes them, and a user queries them
// by the conventions' names (mcp.method.name), which semconv exports. The
// keys are read from this file's source too (internal/attrs), with
// telemetry's, for the README's attribute tables and the demo's test that
// every key a trace carries is declared, so each keeps its comment.
const (
	keyMethodName       = semconv.McpMethodNameKey      // MCP client and server spans: the request's method (tools/call, tools/list, initialize, …)
	keySessionID        = semconv.McpSessionIDKey       // MCP client and server spans: the session's ID, when the transport has one (Streamable HTTP's Mcp-Session-Id)
	keyProtocolVersion  = semconv.McpProtocolVersionKey // MCP client and server spans: the protocol version the session negotiated
	keyJSONRPCRequestID = semconv.JSONRPCRequestIDKey   // MCP client span: the JSON-RPC request's id, as a string
	// keyRPCStatusCode is on an MCP span of a request answered with a
	// JSON-RPC error: its code, as a string ("-32602").
	keyRPCStatusCode          = semconv.RPCResponseStatusCodeKey
	keyNetworkTransport       = semconv.NetworkTransportKey       // MCP client and server spans: pipe (stdio) or tcp (Streamable HTTP)
	keyNetworkProtocolName    = semconv.NetworkProtocolNameKey    // MCP client and server spans over Streamable HTTP: http
	keyNetworkProtocolVersion = semconv.NetworkProtocolVersionKey // MCP client span over Streamable HTTP: the HTTP version of the exchange (1.1, 2)
)

// layerMCP is the retrace.layer of an MCP client span: each request an MCP
// client sends is a layer call of its own, the leaf that retrace.calls
// counts.
const layerMCP = "mcp"

// The value of mcp.method.name that this adapter treats apart, those of
// network.transport, and error.type's for a tool that answered isError.
const (
	methodToolsCall    = "tools/call"
	transportPipe      = "pipe"
	transportTCP       = "tcp"
	errorTypeToolError = "tool_error"
)

// The MCP metrics, with the conventions' names.
const (
	// metricClientOperationDuration is a histogram of each request's
	// duration as the client sends it until its answer, in seconds, by
	// mcp.method.name, gen_ai.tool.name, error.type, mcp.protocol.version and
	// network.transport.
	metricClientOperationDuration = "mcp.client.operation.duration"
	// metricClientSessionDuration is a histogram of each client session's
	// duration, from its first request until it closed, in seconds, by
	// mcp.protocol.version and, when it ended on an error, error.type.
	metricClientSessionDuration = "mcp.client.session.duration"
	// metricServerOperationDuration is a histogram of each request's
	// duration as a server handles it, in seconds, by mcp.method.name,
	// gen_ai.tool.name, error.type, mcp.protocol.version and
	// network.transport.
	metricServerOperationDuration = "mcp.server.operation.duration"
)

// durationBuckets are the conventions' bucket boundaries for the MCP
// duration histograms, a fresh slice each call.
func durationBuckets() []float64 {
	return []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
}
