package session

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// OpenAIConfig configures an OpenAI-compatible provider.
type OpenAIConfig struct {
	BaseURL string // e.g. "https://api.openai.com/v1"; empty → the SDK's default
	APIKey  string // sent as a bearer token; never recorded
	// SDKRetries turns the SDK's own retries back on (it is 0, off, by
	// default): a third retry layer, hidden inside each model call, that
	// multiplies the calls of the two above it.
	SDKRetries int
	// HTTPClient, if set, makes the requests (with middleware.Transport in it,
	// each request is a span).
	HTTPClient *http.Client
	// Middleware runs around each HTTP request the SDK makes, inside its
	// retry loop (option.WithMiddleware): middleware.SDK("openai-go",
	// SDKRetries, opts...) makes each request a span, counted in
	// retrace.calls, and names the SDK's retries in the trace.
	Middleware []middleware.RequestMiddleware
	// Name is gen_ai.provider.name; empty → "openai".
	Name string
	// Limits bound what the provider reads of an answer: one event, a
	// whole stream, an error body. The zero value is the defaults (1 MiB,
	// 64 MiB, 1 MiB).
	Limits Limits
}

// OpenAI is a streaming Provider for OpenAI-compatible chat completions.
type OpenAI struct {
	client openai.Client
	name   string
	key    string
	base   string // the configured base URL; empty → the SDK's default
}

// NewOpenAI returns a provider built on github.com/openai/openai-go/v3, with
// the SDK's own retries off unless cfg.SDKRetries says otherwise.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	opts := []option.RequestOption{
		option.WithMaxRetries(max(cfg.SDKRetries, 0)),
	}
	for _, m := range cfg.Middleware {
		if m != nil {
			opts = append(opts, option.WithMiddleware(m))
		}
	}
	opts = append(opts, option.WithMiddleware(cfg.Limits.orDefaults().middleware))
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	name := cfg.Name
	if name == "" {
		name = "openai"
	}
	return &OpenAI{client: openai.NewClient(opts...), name: name, key: cfg.APIKey, base: cfg.BaseURL}
}

// Name implements Provider.
func (p *OpenAI) Name() string { return p.name }

// Server is the host and port the provider calls (server.address and
// server.port on its inference spans).
func (p *OpenAI) Server() (string, int) { return serverOf(p.base, "api.openai.com") }

// Secrets implements SecretHolder: the configured API key, which a session
// redacts by exact value wherever retrace writes text (a provider may echo
// it back: "Incorrect API key provided: …").
func (p *OpenAI) Secrets() []string { return []string{p.key} }

// Stream implements Provider: one streaming chat completion.
func (p *OpenAI) Stream(ctx context.Context, req Request, onDelta func(Delta)) (Message, error) {
	params := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(req.Model),
		Messages:      toOpenAI(req.Messages),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for _, t := range req.Tools {
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: shared.FunctionParameters(t.Parameters),
		}))
	}
	var resp *http.Response
	stream := p.client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
	defer func() { _ = stream.Close() }()

	var (
		acc     openai.ChatCompletionAccumulator
		finish  string
		started = resp != nil && resp.StatusCode < 300
	)
	if started {
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
			return Message{}, malformed(fmt.Errorf("expected an event stream, got Content-Type %q", resp.Header.Get("Content-Type")))
		}
	}
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" && onDelta != nil {
				onDelta(Delta{Text: c.Delta.Content})
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return Message{}, p.streamError(ctx, err, resp, started)
	}
	if finish == "" {
		// A clean end before [DONE], or before any finish reason: the stream
		// dropped without a word.
		return Message{}, policies.StreamDropped("", io.ErrUnexpectedEOF)
	}
	msg := Message{Role: Assistant, StopReason: finish, Usage: Usage{
		InputTokens: int(acc.Usage.PromptTokens), OutputTokens: int(acc.Usage.CompletionTokens),
	}}
	if len(acc.Choices) > 0 {
		m := acc.Choices[0].Message
		msg.Content = m.Content
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	msg.Model, msg.ResponseID = acc.Model, acc.ID // the model that answered, which the session names if empty
	return msg, nil
}

// streamError maps what the SDK reports to retrace's errors.
func (p *OpenAI) streamError(ctx context.Context, err error, resp *http.Response, started bool) error {
	if resp != nil && resp.StatusCode >= 400 {
		if _, read := errors.AsType[*openai.Error](err); !read && ctx.Err() != nil {
			return err // the caller's end, or the attempt timeout's, cut the reading of the body
		}
		// An error answer is decoded from its body (the part the limits let
		// the SDK read, which it puts back) by the function the HTTP layer
		// decodes it with, not by the SDK, which fails on an "error" that is
		// a string: so the answer is an *policies.Error classified by its
		// status, its code and its type, as it is in the HTTP layer's spans.
		return policies.ErrorFrom(resp)
	}
	if e := ownStreamError(err); e != nil {
		return e // a limit passed, or an error event (named "error", or one no rule knows)
	}
	if se, ok := errors.AsType[*ssestream.StreamError](err); ok {
		return eventError(se.Event.Data) // an event whose data holds an "error"
	}
	return readFailure(ctx, err, started)
}

// ownStreamError is the error retrace's own limits beneath an SDK put in
// its stream (a limit passed, an error event read by the limits), or nil.
func ownStreamError(err error) error {
	if e, ok := errors.AsType[*policies.Error](err); ok {
		return e
	}
	return nil
}

// readFailure maps a failure to read an SDK's stream that is neither an
// error answer nor an error event: a line past the SDK's limit, an event
// that is not JSON, the caller's end, or a stream that broke after it began
// (dropped, which the session retries).
func readFailure(ctx context.Context, err error, started bool) error {
	if errors.Is(err, bufio.ErrTooLong) {
		return limitExceeded(limitSDKLine, sdkLineLimit)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return malformed(err)
	}
	if ctx.Err() != nil {
		return err // the caller's end, or the attempt timeout's
	}
	if started {
		return policies.StreamDropped("", err)
	}
	return err
}

// malformed is a provider answer that is not what the protocol says: a
// gateway's error page, a broken event. Such answers come and go with the
// gateway, so they are Transient.
func malformed(err error) error {
	return &policies.Error{Class: policies.Transient, Type: "malformed_response", Err: fmt.Errorf("malformed response from the provider: %w", err)}
}

func toOpenAI(msgs []Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs))
	for _, m := range msgs {
		switch m.Role {
		case System:
			out = append(out, openai.SystemMessage(m.Content))
		case User:
			out = append(out, openai.UserMessage(m.Content))
		case ToolRole:
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		default:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: strings.TrimSpace(tc.Arguments)},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}
