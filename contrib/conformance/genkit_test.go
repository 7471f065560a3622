package conformance_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai"
	"github.com/openai/openai-go/option"

	retracegenkit "github.com/retrace-go/retrace/contrib/genkit"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/retracetest"
)

func init() {
	paths = append(paths, path{name: "genkit", protocol: "openai", call: genkitCall})
}

// genkitCall is genkit's Generate on the compat_oai plugin (openai-go, its
// retries off, middleware.SDK), with retrace's plugin on the instance and
// retrace's genkit middleware on the call, streamed: the README's genkit
// lines. The answer is the text the streaming callback was given, which
// must be the response's: a retried stream's text reaches it once.
func genkitCall(t *testing.T, ctx context.Context, srv *retracetest.Server, e env) (string, error) {
	ctx, cancel := context.WithCancel(ctx) // genkit.Init watches for signals until ctx ends
	defer cancel()
	g := genkit.Init(ctx, genkit.WithPlugins(&compat_oai.OpenAICompatible{
		Provider: "fault", BaseURL: srv.URL(), APIKey: "sk-test-0000000000000000",
		Opts: []option.RequestOption{option.WithHTTPClient(client(t)), option.WithMaxRetries(0), option.WithMiddleware(middleware.SDK("openai-go", 0))},
	}, &retracegenkit.Plugin{}))
	rt := retracegenkit.New(retracegenkit.Config{Options: e.opts})
	var streamed strings.Builder
	resp, err := genkit.Generate(ctx, g, ai.WithModelName("fault/gpt-test"), ai.WithPrompt("hello"), ai.WithUse(rt),
		ai.WithStreaming(func(_ context.Context, ch *ai.ModelResponseChunk) error {
			streamed.WriteString(ch.Text())
			return nil
		}))
	if err != nil {
		return "", err
	}
	if streamed.String() != resp.Text() {
		return "", fmt.Errorf("genkit: the callback was given %q, the answer is %q", streamed.String(), resp.Text())
	}
	return streamed.String(), nil
}
