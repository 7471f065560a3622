package conformance_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// sdkRetries is the SDK's own retries in the own-client rows: off, as the
// README's "Own client" lines set them, so that one layer retries (the
// SDK's resends, and what middleware.SDK tells it not to resend, are
// middleware's tests).
const sdkRetries = 0

func init() {
	paths = append(paths,
		path{name: "retrace OpenAI provider", protocol: "openai", call: ownProvider(func(srv *retracetest.Server, hc *http.Client) session.Provider {
			return session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test-0000000000000000", HTTPClient: hc})
		})},
		path{name: "retrace Anthropic provider", protocol: "anthropic", call: ownProvider(func(srv *retracetest.Server, hc *http.Client) session.Provider {
			return session.NewAnthropic(session.AnthropicConfig{BaseURL: srv.AnthropicURL(), APIKey: "sk-ant-test-0000000000000000", HTTPClient: hc})
		})},
		path{name: "own openai-go + middleware.SDK", protocol: "openai", call: ownOpenAI},
		path{name: "own anthropic-sdk-go + middleware.SDK", protocol: "anthropic", call: ownAnthropic},
	)
}

// client is an HTTP client whose idle connections close with the test.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// ownProvider is a Session on one of retrace's providers: the reference.
func ownProvider(p func(*retracetest.Server, *http.Client) session.Provider) func(*testing.T, context.Context, *retracetest.Server, env) (string, error) {
	return func(t *testing.T, ctx context.Context, srv *retracetest.Server, e env) (string, error) {
		s, err := session.New(session.Config{Provider: p(srv, client(t)), Model: "gpt-test", Options: e.opts})
		if err != nil {
			return "", err
		}
		msg, err := s.Run(ctx, "hello")
		return msg.Content, err
	}
}

// ownOpenAI is a user's own openai-go client, its retries at their
// default, with retrace's SDK middleware, read as a stream in a handler
// under session.InferenceLayers: the "Own client" lines of the README.
func ownOpenAI(t *testing.T, ctx context.Context, srv *retracetest.Server, e env) (string, error) {
	c := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk-test-0000000000000000"),
		option.WithHTTPClient(client(t)), option.WithMaxRetries(sdkRetries),
		option.WithMiddleware(middleware.SDK("openai-go", sdkRetries)))
	call := session.InferenceLayers[string](session.Inference[string]{Provider: "openai", Model: "gpt-test", Stream: true, Options: e.opts})
	return call(func(ctx context.Context, prompt string) (string, error) {
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		})
		defer func() { _ = stream.Close() }()
		var b strings.Builder
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				b.WriteString(ch.Delta.Content)
			}
		}
		return b.String(), stream.Err()
	})(ctx, "hello")
}

// ownAnthropic is ownOpenAI with anthropic-sdk-go.
func ownAnthropic(t *testing.T, ctx context.Context, srv *retracetest.Server, e env) (string, error) {
	c := anthropic.NewClient(aoption.WithBaseURL(srv.AnthropicURL()), aoption.WithAPIKey("sk-ant-test-0000000000000000"),
		aoption.WithHTTPClient(client(t)), aoption.WithMaxRetries(sdkRetries),
		aoption.WithMiddleware(middleware.SDK("anthropic-sdk-go", sdkRetries)))
	call := session.InferenceLayers[string](session.Inference[string]{Provider: "anthropic", Model: "gpt-test", Stream: true, Options: e.opts})
	return call(func(ctx context.Context, prompt string) (string, error) {
		stream := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
			Model: "gpt-test", MaxTokens: 256, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		})
		defer func() { _ = stream.Close() }()
		var b strings.Builder
		for stream.Next() {
			if d, ok := stream.Current().AsAny().(anthropic.ContentBlockDeltaEvent); ok {
				b.WriteString(d.Delta.Text)
			}
		}
		return b.String(), stream.Err()
	})(ctx, "hello")
}
