package retracemcp_test

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrace-go/retrace/clock"
	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/tool"
)

// An agent's search_docs is an MCP server's tool, rate limited: the
// client retries it inside the task budget, and the model reads the
// failure as it reads a Go tool's.
func Example() {
	ctx := context.Background()

	// The MCP server, a Go one here: its middleware joins the caller's
	// trace, and ToolError says what its failure is.
	server := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1.0.0"}, nil)
	server.AddReceivingMiddleware(retracemcp.ServerMiddleware(retracemcp.ServerConfig{}))
	mcp.AddTool(server, &mcp.Tool{Name: "search_docs", Description: "Search the runbooks."},
		func(context.Context, *mcp.CallToolRequest, struct {
			Query string `json:"query"`
		}) (*mcp.CallToolResult, any, error) {
			return retracemcp.ToolError(&policies.Error{StatusCode: 429, Code: "rate_limit_error", Message: "Too Many Requests"}), nil, nil
		})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = ss.Wait() }()

	// The agent: one middleware on its MCP client.
	rc := retracemcp.New(retracemcp.Config{Tool: tool.Config{Clock: clock.NewVirtual(time.Now())}}) // the backoffs pass at once
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	client.AddSendingMiddleware(rc.Middleware())
	cs, err := client.Connect(ctx, rc.Transport(ct), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = cs.Close() }()

	tools, err := rc.Attach(cs).Tools(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	box := tool.NewBox(tools...) // with the agent's Go tools, for runtime.Loop
	msg := box.Invoke(ctx, session.ToolCall{ID: "call_1", Name: "search_docs", Arguments: `{"query":"payment API 429"}`})
	fmt.Println(msg.Content)
	// Output:
	// {"error":{"class":"transient","retryable":true,"message":"429 rate_limit_error: Too Many Requests","hint":"search_docs failed 3 times (rate_limit_error): try again later, or use another tool"}}
}
