// Package retracemcp puts an agent's MCP tools under retrace, across the
// process boundary: the tool calls an agent makes to a Model Context
// Protocol server (github.com/modelcontextprotocol/go-sdk) are governed as
// a Go tool's are, traced as the OpenTelemetry MCP conventions say, and
// joined to the server's own spans in one trace.
//
// On the client, a [Client]'s sending middleware makes every request a
// CLIENT span ("tools/call {tool}", layer mcp, a leaf call counted in
// retrace.calls) and writes the trace context into its params._meta; every
// tools/call goes through the tool's governance (classification, retry
// inside the task budget, a breaker per server and tool, a bulkhead), and
// [Server.Tools] lists the server's tools as tool.Tool values for a
// tool.Box and runtime.Loop, whose failures the model reads as it reads a
// Go tool's:
//
//	rc := retracemcp.New(retracemcp.Config{})
//	client := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil)
//	client.AddSendingMiddleware(rc.Middleware())
//	cs, err := client.Connect(ctx, rc.Transport(&mcp.CommandTransport{Command: exec.Command("docs-server")}), nil)
//	tools, err := rc.Attach(cs).Tools(ctx)
//	box := tool.NewBox(append(tools, searchCache)...)
//
// What an answer means: a result with isError is the tool's failure, of the
// class the server gave it ([ToolError], [MetaKeyError]) or, without one,
// of the class retrace's rules read in its text (error.type tool_error);
// a JSON-RPC error is classified by its code (an unknown tool or invalid
// params are Programming, an internal error Transient); a network failure
// as retrace classifies any; a session that ended (the server's process
// exited) is Fatal, or Transient with a restart ([Client.Start]), which
// happens only when asked for.
//
// On the server, [ServerMiddleware] makes each request it receives a
// SERVER span whose parent is the client's request span, from the trace
// context in params._meta, so that the server's own spans are in the
// caller's trace.
//
// Package mcptest is an MCP server whose tools fail on purpose, to test a
// client under retrace against a server's failures.
package retracemcp
