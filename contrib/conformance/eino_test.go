package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/adk"

	retraceeino "github.com/retrace-go/retrace/contrib/eino"
	"github.com/retrace-go/retrace/retracetest"
)

func init() {
	paths = append(paths, path{name: "eino", protocol: "openai", call: einoCall})
}

// einoCall is an eino ChatModelAgent on eino-ext's OpenAI model, under
// retrace's eino middleware, run as a stream: the README's eino lines, but
// with an HTTP client without middleware.Transport, so that the adapter's
// own model call is the leaf and alone judges a stream's end (eino-ext's
// stream reader ends as cleanly without [DONE] as with it).
func einoCall(t *testing.T, ctx context.Context, srv *retracetest.Server, e env) (string, error) {
	mw := retraceeino.New(retraceeino.Config{Model: "gpt-test", Provider: "openai", Clock: e.clk, Options: e.opts})
	chat, err := openai.NewChatModel(ctx, &openai.ChatModelConfig{
		BaseURL: srv.URL(), APIKey: "sk-test-0000000000000000", Model: "gpt-test", HTTPClient: client(t),
	})
	if err != nil {
		return "", err
	}
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: "conformance", Description: "answers", Instruction: "Answer.", Model: chat,
		Handlers: []adk.ChatModelAgentMiddleware{mw},
	})
	if err != nil {
		return "", err
	}
	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: mw.Agent(agent), EnableStreaming: true})
	var text strings.Builder
	var runErr error
	for it := runner.Query(ctx, "hello"); ; {
		ev, ok := it.Next()
		if !ok {
			break
		}
		if ev.Err != nil {
			runErr = ev.Err
			continue
		}
		if ev.Output == nil || ev.Output.MessageOutput == nil {
			continue
		}
		mo := ev.Output.MessageOutput
		if mo.IsStreaming {
			for {
				m, err := mo.MessageStream.Recv()
				if err != nil {
					break
				}
				text.WriteString(m.Content)
			}
		} else if mo.Message != nil {
			text.WriteString(mo.Message.Content)
		}
	}
	if runErr == nil && text.Len() == 0 {
		return "", errors.New("eino: no answer")
	}
	return text.String(), runErr
}
