package tool_test

import (
	"context"
	"fmt"
	"time"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/tool"
)

// A tool whose downstream is rate limited: the model gets one final state it
// can act on, not three errors.
func ExampleTool_Invoke() {
	search := tool.New("search_docs", func(ctx context.Context, q struct{ Query string }) ([]string, error) {
		return nil, &policies.Error{StatusCode: 429, Code: "rate_limit_exceeded", Message: "Too Many Requests"}
	}, tool.Config{Clock: clock.NewVirtual(time.Unix(0, 0))})

	res := search.Invoke(context.Background(), `{"Query": "payment 429"}`)
	fmt.Println(res.Content)
	// Output:
	// {"error":{"class":"transient","retryable":true,"message":"429 rate_limit_exceeded: Too Many Requests","hint":"search_docs failed 3 times (rate_limit_exceeded): try again later, or use another tool"}}
}
