package retracemcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrace-go/retrace/contrib/mcp/mcptest"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// The fault server of these tests is this test binary run again as a
// child process (serverCommand), with faultsEnv set: TestMain then serves
// mcptest's server instead of running the tests, over stdio, or over
// Streamable HTTP on 127.0.0.1 with -http, and tells its parent, one JSON
// line on stderr each, every event and where it listens.
const (
	faultsEnv = "RETRACEMCP_FAULT_SERVER"
	// secretEnv names the variable whose value the leak tool quotes,
	// redactEnv the variable of the secret the server's middleware knows
	// to redact.
	secretEnv = "RETRACEMCP_FAULT_SECRET"
	redactEnv = "RETRACEMCP_FAULT_REDACT"
)

// event is one line the fault server writes on its stderr.
type event struct {
	mcptest.Event
	URL string `json:"url,omitempty"` // Kind "listening": where it serves HTTP
}

// serveFaults is the child's main.
func serveFaults(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	addr := fs.String("http", "", "serve Streamable HTTP on this address (127.0.0.1:0) instead of stdio")
	spans := fs.String("spans", "", "append each of the server's spans to this file, one line of OTLP JSON each")
	crashOnce := fs.String("crash-once", "", "the crash tool exits only when this file does not exist yet, and makes it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "faults")))}
	if *spans != "" {
		f, err := os.OpenFile(*spans, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		opts = append(opts, sdktrace.WithSpanProcessor(&spanFile{w: f}))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	defer func() { _ = tp.Shutdown(context.Background()) }()

	log := &eventLog{w: stderr}
	cfg := mcptest.Config{FailFirst: 2, Secret: os.Getenv(secretEnv), CrashOnce: *crashOnce, TracerProvider: tp,
		OnEvent: func(ev mcptest.Event) { log.write(event{Event: ev}) }}
	if v := os.Getenv(redactEnv); v != "" {
		cfg.Redact = []string{v}
	}
	srv := mcptest.NewServer(cfg)
	if *addr == "" {
		return srv.Serve(ctx, os.Stdin, os.Stdout)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler()}
	log.write(event{Event: mcptest.Event{Kind: "listening"}, URL: "http://" + ln.Addr().String() + "/mcp"})
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// eventLog writes events as JSON lines, one at a time.
type eventLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *eventLog) write(ev event) {
	b, _ := json.Marshal(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}

// spanFile writes each span as it ends, so that a process that exits
// abruptly has written the spans that ended before.
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
