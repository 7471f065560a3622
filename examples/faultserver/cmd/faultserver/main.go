// Command faultserver runs a fault-injecting OpenAI-compatible
// chat-completions server on the loopback interface.
//
//	go run ./examples/faultserver/cmd/faultserver -fault 429 -fail-first 3
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/retrace-go/retrace/examples/faultserver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8089", "listen address; the host must be 127.0.0.1, localhost or ::1")
	name := flag.String("fault", "ok", "ok, 429, 429ms, 500, 502, 503, 529, reset, eof, invalid-api-key, context-overflow, insufficient-quota, invalid-image, string-401, error-event, huge-event, huge-error, slow, hang, malformed or bad-json")
	failFirst := flag.Int("fail-first", 0, "the first N requests get the fault, the rest succeed; 0 means every request gets it")
	retryAfter := flag.Duration("retry-after", 2*time.Second, "the retry delay that 429 and 429ms announce")
	slow := flag.Duration("slow", 5*time.Second, "how long slow waits before answering")
	flag.Parse()

	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if err := run(*addr, *name, *failFirst, *retryAfter, *slow); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(addr, name string, failFirst int, retryAfter, slow time.Duration) error {
	f, err := fault(name, retryAfter, slow)
	if err != nil {
		return err
	}
	script := faultserver.FailFirst(failFirst, f)
	srv := faultserver.New(func(n int, req faultserver.Request) faultserver.Fault {
		got := script(n, req)
		log.Printf("request %d: model=%q stream=%t fault=%s", n+1, req.Model, req.Stream, got)
		return got
	})
	if err := srv.StartOn(addr); err != nil {
		return err
	}
	defer srv.Close()
	log.Printf("serving %s with fault %s (fail-first %d)", srv.URL(), f, failFirst)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Printf("stopping after %d requests", srv.Requests())
	return nil
}

func fault(name string, retryAfter, slow time.Duration) (faultserver.Fault, error) {
	switch name {
	case "ok":
		return faultserver.OK(), nil
	case "429":
		return faultserver.RateLimited(retryAfter), nil
	case "429ms":
		return faultserver.RateLimitedMs(retryAfter), nil
	case "500", "502", "503":
		var status int
		_, _ = fmt.Sscan(name, &status)
		return faultserver.ServerError(status), nil
	case "529":
		return faultserver.Overloaded(), nil
	case "reset":
		return faultserver.StreamReset(2), nil
	case "eof":
		return faultserver.StreamEOF(2), nil
	case "invalid-api-key":
		return faultserver.InvalidAPIKey(), nil
	case "context-overflow":
		return faultserver.ContextOverflow(), nil
	case "insufficient-quota":
		return faultserver.InsufficientQuota(), nil
	case "invalid-image":
		return faultserver.InvalidImage(), nil
	case "string-401":
		return faultserver.StringError(401, "Invalid API key"), nil
	case "error-event":
		return faultserver.ErrorEvent(2, "", "server_error", "The server had an error while processing your request."), nil
	case "huge-event":
		return faultserver.HugeEvent(512<<20, 1<<10), nil
	case "huge-error":
		return faultserver.HugeError(500, 100<<20), nil
	case "slow":
		return faultserver.Slow(slow), nil
	case "hang":
		return faultserver.Hang(), nil
	case "malformed":
		return faultserver.Malformed(), nil
	case "bad-json":
		return faultserver.BadJSON(), nil
	}
	return faultserver.Fault{}, fmt.Errorf("faultserver: unknown fault %q; see -help", name)
}
