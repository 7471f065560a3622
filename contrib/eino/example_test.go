package retraceeino_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/adk"
	einotool "github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"

	retraceeino "github.com/retrace-go/retrace/contrib/eino"
)

// An eino agent whose provider is down twice: retrace's session layer
// retries, and the run's trace counts every request.
func Example() {
	srv := retracetest.New(retracetest.Sequence(
		retracetest.ServerError(503), retracetest.ServerError(503), retracetest.Reply("Back off and batch."),
	))
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rec := tracetest.NewSpanRecorder() // to print the trace below; an application sets up OTel once
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx := context.Background()

	// The user code retrace needs: four lines, marked.
	mw := retraceeino.New(retraceeino.Config{Model: "gpt-4o-mini", Clock: clock.NewVirtual(time.Now()), // 1 (the clock makes 2 s and 4 s pass at once)
		Options: []middleware.Option{middleware.WithTracerProvider(tp)}})
	chat, err := openai.NewChatModel(ctx, &openai.ChatModelConfig{BaseURL: srv.URL(), APIKey: "sk-example", Model: "gpt-4o-mini",
		HTTPClient: &http.Client{Transport: middleware.Transport(nil, "http", middleware.WithTracerProvider(tp))}}) // 2: each request a span
	if err != nil {
		panic(err)
	}
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "oncall", Description: "on-call assistant", Model: chat,
		Handlers: []adk.ChatModelAgentMiddleware{mw}}) // 3
	if err != nil {
		panic(err)
	}
	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: mw.Agent(agent)}) // 4

	for it := runner.Query(ctx, "Why is the payment API answering 429?"); ; {
		ev, ok := it.Next()
		if !ok {
			break
		}
		if ev.Err != nil {
			fmt.Println("error:", ev.Err)
		} else if msg, err := ev.Output.MessageOutput.GetMessage(); err == nil {
			fmt.Println("answer:", msg.Content)
		}
	}
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			for _, kv := range s.Attributes() {
				if kv.Key == telemetry.Calls {
					fmt.Println(s.Name(), "retrace.calls =", kv.Value.AsInt64())
				}
			}
		}
	}
	fmt.Println("provider requests:", srv.Requests())
	_ = tp.Shutdown(ctx)
	// Output:
	// answer: Back off and batch.
	// invoke_agent oncall retrace.calls = 3
	// provider requests: 3
}

// A tool whose failures the model should read in the tool's own words:
// retrace's WrapToolWithErrorHandler, where eino's would hide every failure
// from retrace (a run with eino's is refused). The tool is governed (its
// retries, its breaker, its spans), and the handler words the final
// failure.
func ExampleWrapToolWithErrorHandler() {
	search, err := utils.InferTool("search_docs", "Search the runbooks.", func(context.Context, struct{ Query string }) (string, error) {
		return "", errors.New("the search index is rebuilding")
	})
	if err != nil {
		panic(err)
	}
	handled := retraceeino.WrapToolWithErrorHandler(search, func(_ context.Context, err error) string {
		return "search_docs is unavailable (" + err.Error() + "): answer from what you know"
	})
	_ = compose.ToolsNodeConfig{Tools: []einotool.BaseTool{handled}} // the agent's ToolsConfig
}
