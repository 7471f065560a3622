package retracegenkit_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai"
	"github.com/openai/openai-go/option"

	"github.com/retrace-go/retrace/clock"
	retracegenkit "github.com/retrace-go/retrace/contrib/genkit"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/retracetest"
)

// A genkit agent whose provider answers 503 twice: retrace's session layer
// retries the model call and the agent answers. The lines marked "retrace"
// are all the user code retrace needs (the SDK middleware only to see each
// HTTP request and the SDK's own retries). The middleware may be made per
// request: the Plugin keeps what must outlive one.
func Example() {
	// The provider: a local fault server, 503 twice, then an answer.
	srv := retracetest.New(retracetest.Sequence(
		retracetest.ServerError(503), retracetest.ServerError(503), retracetest.Reply("Back off and batch.")))
	if err := srv.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	// genkit.Init watches for SIGINT and SIGTERM until ctx ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := genkit.Init(ctx, genkit.WithPlugins(&compat_oai.OpenAICompatible{
		Provider: "fault", BaseURL: srv.URL(), APIKey: "sk-example-0000000000000000",
		Opts: []option.RequestOption{
			option.WithHTTPClient(&http.Client{Transport: tr}),
			option.WithMaxRetries(0), option.WithMiddleware(middleware.SDK("openai-go", 0)), // retrace (optional)
		},
	}, &retracegenkit.Plugin{})) // retrace: the tools' breakers, kept by g

	// The example's backoffs pass at once; a program leaves the clock out.
	clk := middleware.WithClock(clock.NewVirtual(time.Unix(0, 0)))
	rt := retracegenkit.New(retracegenkit.Config{Options: []middleware.Option{clk}}) // retrace
	resp, err := genkit.Generate(ctx, g,
		ai.WithModelName("fault/gpt-test"),
		ai.WithPrompt("Why is the payment API answering 429?"),
		ai.WithUse(rt), // retrace
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Text())
	fmt.Println("provider requests:", srv.Requests())
	// Output:
	// Back off and batch.
	// provider requests: 3
}
