package telemetry

import (
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// The Model Context Protocol's keys, as the OpenTelemetry GenAI conventions
// for MCP name them (docs/gen-ai/mcp.md), on the spans and metrics of
// contrib/mcp: a CLIENT span per request the client sends ("tools/call
// {gen_ai.tool.name}"), a SERVER span per request a server receives.
const (
	MCPMethodName      = semconv.McpMethodNameKey      // MCP client and server spans: the request's method (tools/call, tools/list, initialize, …)
	MCPSessionID       = semconv.McpSessionIDKey       // MCP client and server spans: the session's ID, when the transport has one (Streamable HTTP's Mcp-Session-Id)
	MCPProtocolVersion = semconv.McpProtocolVersionKey // MCP client and server spans: the protocol version the session negotiated
	JSONRPCRequestID   = semconv.JSONRPCRequestIDKey   // MCP client span: the JSON-RPC request's id, as a string
	// RPCResponseStatusCode is on an MCP span of a request answered with a
	// JSON-RPC error: its code, as a string ("-32602").
	RPCResponseStatusCode  = semconv.RPCResponseStatusCodeKey
	NetworkTransport       = semconv.NetworkTransportKey       // MCP client and server spans: pipe (stdio) or tcp (Streamable HTTP)
	NetworkProtocolName    = semconv.NetworkProtocolNameKey    // MCP client and server spans over Streamable HTTP: http
	NetworkProtocolVersion = semconv.NetworkProtocolVersionKey // MCP client span over Streamable HTTP: the HTTP version of the exchange (1.1, 2)
)

// LayerMCP is the retrace.layer of an MCP client span: each request an MCP
// client sends is a layer call of its own, the leaf that retrace.calls
// counts.
const LayerMCP = "mcp"

// The values of mcp.method.name that contrib/mcp treats apart, of
// network.transport, and error.type's for a tool that answered isError.
const (
	MCPMethodToolsCall   = "tools/call"
	NetworkTransportPipe = "pipe"
	NetworkTransportTCP  = "tcp"
	ErrorTypeToolError   = "tool_error"
)

// The MCP metrics, with the conventions' names.
const (
	// MetricMCPClientOperationDuration is a histogram of each request's
	// duration as the client sends it until its answer, in seconds, by
	// mcp.method.name, gen_ai.tool.name, error.type, mcp.protocol.version and
	// network.transport.
	MetricMCPClientOperationDuration = "mcp.client.operation.duration"
	// MetricMCPClientSessionDuration is a histogram of each client session's
	// duration, from its first request until it closed, in seconds, by
	// mcp.protocol.version and, when it ended on an error, error.type.
	MetricMCPClientSessionDuration = "mcp.client.session.duration"
	// MetricMCPServerOperationDuration is a histogram of each request's
	// duration as a server handles it, in seconds, by mcp.method.name,
	// gen_ai.tool.name, error.type, mcp.protocol.version and
	// network.transport.
	MetricMCPServerOperationDuration = "mcp.server.operation.duration"
)

// MCPDurationBuckets are the conventions' bucket boundaries for the MCP
// duration histograms, a fresh slice each call.
func MCPDurationBuckets() []float64 {
	return []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
}
