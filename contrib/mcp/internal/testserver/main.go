// Command testserver is the fault-injecting MCP server of contrib/mcp's
// tests (package faultserver), run as a child process: over stdio by
// default, over Streamable HTTP with -http 127.0.0.1:0.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/retrace-go/retrace/contrib/mcp/internal/faultserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := faultserver.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
}
