package mcptest_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrace-go/retrace/clock"
	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/contrib/mcp/mcptest"
	"github.com/retrace-go/retrace/tool"
)

// A client under retrace calls a tool that fails twice before it answers:
// the tool's retry makes three requests, and the caller reads the answer.
func Example() {
	ctx := context.Background()
	var calls atomic.Int64
	faults := mcptest.NewServer(mcptest.Config{FailFirst: 2, OnEvent: func(ev mcptest.Event) {
		if ev.Kind == "request" && ev.Tool == "flaky" {
			calls.Add(1)
		}
	}})
	hs := httptest.NewServer(faults.Handler())
	defer hs.Close()

	rc := retracemcp.New(retracemcp.Config{Tool: tool.Config{Clock: clock.NewVirtual(time.Now())}}) // the backoffs pass at once
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	cs, err := rc.Connect(ctx, client, &mcp.StreamableClientTransport{Endpoint: hs.URL, DisableStandaloneSSE: true}, nil)
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
	for _, t := range tools {
		if t.Name() == "flaky" {
			res := t.Invoke(ctx, `{"text":"runbook"}`)
			fmt.Printf("%s, after %d requests\n", res.Content, calls.Load())
		}
	}
	// Output:
	// ok: runbook, after 3 requests
}
