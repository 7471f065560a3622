package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retrace-go/retrace/retracetest"
)

// faultserver runs the fault server until SIGINT or SIGTERM.
func faultserver(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("retrace faultserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8089", "listen address; the host must be 127.0.0.1, localhost or ::1")
	name := fs.String("fault", "ok", "ok, 429, 429ms, 500, 502, 503, 529, reset, eof, invalid-api-key, context-overflow, insufficient-quota, invalid-image, request-too-large, string-401, error-event, huge-event, huge-error, slow, hang, malformed or bad-json; each answers in the words of the API called, OpenAI's or Anthropic's")
	failFirst := fs.Int("fail-first", 0, "the first N requests get the fault, the rest succeed; 0 means every request gets it")
	retryAfter := fs.Duration("retry-after", 2*time.Second, "the retry delay that 429 and 429ms announce")
	slow := fs.Duration("slow", 5*time.Second, "how long slow waits before answering")
	var calls toolCalls
	fs.Var(&calls, "tool-call", "NAME or NAME=JSON-ARGUMENTS: a request whose last message is not a tool result is answered with this tool call (repeatable: the calls go out together); the fault script answers the rest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := fault(*name, *retryAfter, *slow)
	if err != nil {
		return err
	}
	logger := log.New(stderr, "", log.Ltime|log.Lmicroseconds)
	script := retracetest.FailFirst(*failFirst, f)
	var mu sync.Mutex
	scripted := 0 // requests the fault script has answered
	srv := retracetest.New(func(n int, req retracetest.Request) retracetest.Fault {
		var got retracetest.Fault
		if m := req.Messages; len(calls) > 0 && (len(m) == 0 || m[len(m)-1].Role != "tool") {
			got = retracetest.CallTools(calls...)
		} else {
			mu.Lock()
			got = script(scripted, req)
			scripted++
			mu.Unlock()
		}
		logger.Printf("request %d: model=%q stream=%t fault=%s", n+1, req.Model, req.Stream, got)
		return got
	})
	// The signal handler comes first: whoever starts the server waits for
	// "serving" and may stop it at once, and that signal must reach the
	// orderly shutdown, not end the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.StartOn(*addr); err != nil {
		return err
	}
	defer srv.Close()
	logger.Printf("serving %s with fault %s (fail-first %d)", srv.URL(), f, *failFirst)
	<-ctx.Done()
	logger.Printf("stopping after %d requests", srv.Requests())
	return nil
}

// toolCalls is the repeatable -tool-call flag.
type toolCalls []retracetest.ToolCall

func (t *toolCalls) String() string { return fmt.Sprint(len(*t), " tool calls") }

func (t *toolCalls) Set(v string) error {
	name, args, ok := strings.Cut(v, "=")
	if name = strings.TrimSpace(name); name == "" {
		return errors.New("a tool call needs a name: NAME or NAME=JSON")
	}
	if !ok {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return fmt.Errorf("the arguments of %s are not JSON: %q", name, args)
	}
	*t = append(*t, retracetest.ToolCall{ID: fmt.Sprintf("call_%d", len(*t)+1), Name: name, Arguments: args})
	return nil
}

func fault(name string, retryAfter, slow time.Duration) (retracetest.Fault, error) {
	switch name {
	case "ok":
		return retracetest.OK(), nil
	case "429":
		return retracetest.RateLimited(retryAfter), nil
	case "429ms":
		// OpenAI's hint in whole milliseconds, rounded up, instead of
		// Retry-After.
		f := retracetest.RateLimited(retryAfter)
		ms := (max(retryAfter, 0) + time.Millisecond - 1) / time.Millisecond
		f.Header = http.Header{"Retry-After-Ms": {strconv.FormatInt(int64(ms), 10)}}
		return f, nil
	case "500", "502", "503", "529":
		var status int
		_, _ = fmt.Sscan(name, &status)
		return retracetest.ServerError(status), nil
	case "reset":
		return retracetest.StreamReset(2), nil
	case "eof":
		return retracetest.StreamEOF(2), nil
	case "invalid-api-key":
		return retracetest.InvalidAPIKey(), nil
	case "context-overflow":
		return retracetest.ContextOverflow(), nil
	case "insufficient-quota":
		return retracetest.InsufficientQuota(), nil
	case "invalid-image":
		return retracetest.InvalidImage(), nil
	case "request-too-large":
		return retracetest.RequestTooLarge(), nil
	case "string-401":
		return retracetest.StringError(401, "Invalid API key"), nil
	case "error-event":
		return retracetest.ErrorEvent(2, "", "server_error", "The server had an error while processing your request."), nil
	case "huge-event":
		return retracetest.HugeEvent(512<<20, 1<<10), nil
	case "huge-error":
		return retracetest.HugeError(500, 100<<20), nil
	case "slow":
		return retracetest.OK().WithDelay(slow), nil
	case "hang":
		return retracetest.Hang(), nil
	case "malformed":
		return retracetest.Malformed(), nil
	case "bad-json":
		return retracetest.BadJSON(), nil
	}
	return retracetest.Fault{}, fmt.Errorf("unknown fault %q; see -help", name)
}
