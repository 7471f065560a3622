package retracetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
)

// The server answers the first request with a catalogued fault (a 429 with
// Retry-After) and the next with a success, through the real OpenAI client
// with its own retries off, so that each call is one request.
func Example() {
	srv := retracetest.New(retracetest.FailFirst(1, retracetest.RateLimited(2*time.Second)))
	if err := srv.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	client := openai.NewClient(
		option.WithBaseURL(srv.URL()),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
	)
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}

	_, err := client.Chat.Completions.New(context.Background(), params)
	c := policies.Classify(err)
	fmt.Println("first:", c.Class, c.Type, "retry after", c.RetryAfter)

	reply, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("second:", reply.Choices[0].Message.Content)
	fmt.Println(srv.Requests(), "requests")
	// Output:
	// first: transient rate_limit_exceeded retry after 2s
	// second: Hello from the fault server.
	// 2 requests
}
