package readme

import (
	"context"
	"testing"

	einoopenai "github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/adk"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/worker"

	retraceeino "github.com/retrace-go/retrace/contrib/eino"
	retracegenkit "github.com/retrace-go/retrace/contrib/genkit"
	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	redisstate "github.com/retrace-go/retrace/contrib/redis"
	retracetemporal "github.com/retrace-go/retrace/contrib/temporal"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
)

// The names the README's snippets take as given: a reader's own types and
// values, which the README does not spell out each time.
type (
	Prompt = string         // what your model layer is asked
	Reply  = string         // what it answers
	Task   = string         // what your runtime is given
	Args   = map[string]any // a tool's arguments
	Result = string         // a tool's result
)

var (
	ctx        = context.Background()
	t          testing.TB
	openaiKey  string
	backup     session.Provider                          // a second provider, for a fallback
	breaker    *policies.CircuitBreaker[session.Message] // a breaker for it
	g          *genkit.Genkit
	p          string // a prompt
	taskID     string
	handler    func(context.Context, Prompt) (Reply, error) // your model call
	openaiCall func(context.Context, string) (string, error)
	c          client.Client // a Temporal client
)

// The adapters the README's snippets use, required here so that the
// module's go.mod lists them.
var (
	_ = redisstate.New
	_ = redis.NewClient
	_ = retraceeino.New
	_ = retracegenkit.New
	_ = retracemcp.New
	_ = adk.NewRunner
	_ = compat_oai.OpenAICompatible{}
	_ = einoopenai.NewChatModel
	_ = retracetemporal.NewInterceptor
	_ = temporalotel.NewTracingInterceptor
	_ = worker.New
)
