// This file is built into the MCP conformance suite's Go client, the
// go-sdk's own everything-client taken as it is from the module cache, by
// contrib/mcp's TestConformance, which points the client's connectToServer
// at retraceConnect: the same client, every request it sends under
// retrace's middleware and transport.
package main

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
)

var rc = retracemcp.New(retracemcp.Config{})

func retraceConnect(ctx context.Context, client *mcp.Client, transport mcp.Transport) (*mcp.ClientSession, error) {
	return rc.Connect(ctx, client, transport, nil)
}
