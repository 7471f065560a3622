package mcptest_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/contrib/mcp/mcptest"
	"github.com/retrace-go/retrace/middleware"
)

// Over a pair of streams, as over stdio: the server tells each request
// with the trace context it carried, and a crash that already happened
// (CrashOnce's file exists) answers instead of exiting.
func TestServe(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var events []mcptest.Event
	marker := filepath.Join(t.TempDir(), "crashed")
	require.NoError(t, os.WriteFile(marker, nil, 0o644))
	faults := mcptest.NewServer(mcptest.Config{CrashOnce: marker, OnEvent: func(ev mcptest.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	}})

	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- faults.Serve(ctx, toServer, fromServer) }()

	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	rc := retracemcp.New(retracemcp.Config{Options: []middleware.Option{middleware.WithTracerProvider(tp)}})
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	cs, err := rc.Connect(ctx, client, &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	require.NoError(t, err)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "runbook"}})
	require.NoError(t, err)
	assert.Equal(t, "runbook", retracemcp.Text(res))
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "crash"})
	require.NoError(t, err)
	assert.Equal(t, "recovered: this server was started after the crash", retracemcp.Text(res))
	require.NoError(t, cs.Close())
	require.NoError(t, <-served)

	mu.Lock()
	defer mu.Unlock()
	var calls []mcptest.Event
	for _, ev := range events {
		if ev.Kind == "request" && ev.Method == "tools/call" {
			calls = append(calls, ev)
		}
	}
	require.Len(t, calls, 2)
	assert.Equal(t, "echo", calls[0].Tool)
	assert.Equal(t, "crash", calls[1].Tool)
	for _, ev := range calls {
		assert.NotEmpty(t, ev.Traceparent, "the client's trace context, in params._meta")
		assert.Greater(t, ev.N, int64(0))
	}
}
