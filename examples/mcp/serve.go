package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrace-go/retrace/contrib/mcp/mcptest"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// serve is the command run with -serve: search_docs's MCP server, package
// mcptest's, over stdio. It traces where the OTEL_* environment says, and
// appends each of its spans to the -spans file as it ends; it tells each
// request it received on stderr, one JSON line each (requestLog reads
// them).
func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp -serve", flag.ContinueOnError)
	name := fs.String("name", "docs", "the server's name, as its initialize result gives it")
	spans := fs.String("spans", "", "append each of the server's spans to this file, one line of OTLP JSON each")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var opts []setup.Option
	if *spans != "" {
		f, err := os.OpenFile(*spans, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		opts = append(opts, setup.WithSpanProcessor(&spanFile{w: f}))
	}
	tp, shutdown, err := setup.NewTracerProvider(ctx, append(opts, setup.WithServiceName(*name), setup.WithConsole(io.Discard), setup.WithWarnings(os.Stderr))...)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	var mu sync.Mutex
	srv := mcptest.NewServer(mcptest.Config{Name: *name, TracerProvider: tp, OnEvent: func(ev mcptest.Event) {
		b, _ := json.Marshal(ev)
		mu.Lock()
		defer mu.Unlock()
		_, _ = os.Stderr.Write(append(b, '\n'))
	}})
	return srv.Serve(ctx, os.Stdin, os.Stdout)
}

// spanFile writes each span as it ends, so that the parent finds every
// span that ended however the process ends.
type spanFile struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *spanFile) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f *spanFile) OnEnd(s sdktrace.ReadOnlySpan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = setup.WriteOTLPJSON(f.w, []sdktrace.ReadOnlySpan{s})
}
func (f *spanFile) Shutdown(context.Context) error   { return nil }
func (f *spanFile) ForceFlush(context.Context) error { return nil }
