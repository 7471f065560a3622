package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// DefaultAnthropicMaxTokens is the answer bound an [Anthropic] provider
// asks for when its config sets none: the Messages API requires one.
const DefaultAnthropicMaxTokens = 4096

// AnthropicConfig configures a provider for Anthropic's Messages API.
type AnthropicConfig struct {
	// BaseURL is the API's root, without /v1, e.g.
	// "https://api.anthropic.com"; empty → the SDK's default.
	BaseURL string
	// APIKey is the credential; never recorded. The SDK's environment
	// (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, profiles on disk) is not read:
	// the provider sends what its config says and no more, so that the
	// session knows every credential it must redact. Pass
	// os.Getenv("ANTHROPIC_API_KEY") to use the variable.
	APIKey string
	// MaxTokens bounds each answer; 0 → [DefaultAnthropicMaxTokens].
	MaxTokens int
	// SDKRetries turns the SDK's own retries back on (it is 0, off, by
	// default): a third retry layer, hidden inside each model call, that
	// multiplies the calls of the two above it.
	SDKRetries int
	// HTTPClient, if set, makes the requests (with middleware.Transport in it,
	// each request is a span).
	HTTPClient *http.Client
	// Middleware runs around each HTTP request the SDK makes, inside its
	// retry loop (option.WithMiddleware): middleware.SDK("anthropic-sdk-go",
	// SDKRetries, opts...) makes each request a span, counted in
	// retrace.calls, and names the SDK's retries in the trace.
	Middleware []middleware.RequestMiddleware
	// Name is gen_ai.provider.name; empty → "anthropic".
	Name string
	// Limits bound what the provider reads of an answer: one event, a
	// whole stream, an error body. The zero value is the defaults (1 MiB,
	// 64 MiB, 1 MiB).
	Limits Limits
	// SDKTracing keeps the SDK's own OpenTelemetry spans (and its
	// trace-context headers), which it sends through the global tracer
	// provider. They are off by default: the session's model span already
	// is the call's GenAI span, and a second one beneath it would say the
	// same.
	SDKTracing bool
}

// Anthropic is a streaming Provider for Anthropic's Messages API.
type Anthropic struct {
	client    anthropic.Client
	name      string
	key       string
	maxTokens int64
	base      string // the configured base URL; empty → the SDK's default
}

// Server is the host and port the provider calls (server.address and
// server.port on its inference spans).
func (p *Anthropic) Server() (string, int) { return serverOf(p.base, "api.anthropic.com") }

// NewAnthropic returns a provider built on
// github.com/anthropics/anthropic-sdk-go/v2, with the SDK's own retries off
// unless cfg.SDKRetries says otherwise.
func NewAnthropic(cfg AnthropicConfig) *Anthropic {
	opts := []aoption.RequestOption{
		aoption.WithoutEnvironmentDefaults(),
		aoption.WithMaxRetries(max(cfg.SDKRetries, 0)),
	}
	for _, m := range cfg.Middleware {
		if m != nil {
			opts = append(opts, aoption.WithMiddleware(m))
		}
	}
	opts = append(opts, aoption.WithMiddleware(cfg.Limits.orDefaults().middleware))
	if !cfg.SDKTracing {
		opts = append(opts, aoption.WithoutOpenTelemetry())
	}
	if cfg.BaseURL != "" {
		opts = append(opts, aoption.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, aoption.WithAPIKey(cfg.APIKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, aoption.WithHTTPClient(cfg.HTTPClient))
	}
	name := cfg.Name
	if name == "" {
		name = "anthropic"
	}
	maxTokens := cfg.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultAnthropicMaxTokens
	}
	return &Anthropic{client: anthropic.NewClient(opts...), name: name, key: cfg.APIKey, maxTokens: int64(maxTokens), base: cfg.BaseURL}
}

// Name implements Provider.
func (p *Anthropic) Name() string { return p.name }

// Secrets implements SecretHolder: the configured API key, which a session
// redacts by exact value wherever retrace writes text.
func (p *Anthropic) Secrets() []string { return []string{p.key} }

// Stream implements Provider: one streaming Messages API call. A stream
// that ends without message_stop dropped: it fails with a dropped stream
// (policies.StreamDropped) with an empty Message, which the session retries.
func (p *Anthropic) Stream(ctx context.Context, req Request, onDelta func(Delta)) (Message, error) {
	params, err := p.params(req)
	if err != nil {
		return Message{}, err
	}
	var resp *http.Response
	stream := p.client.Messages.NewStreaming(ctx, params, aoption.WithResponseInto(&resp))
	defer func() { _ = stream.Close() }()

	started := resp != nil && resp.StatusCode < 300
	if started {
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
			return Message{}, malformed(fmt.Errorf("expected an event stream, got Content-Type %q", resp.Header.Get("Content-Type")))
		}
	}
	var (
		acc     anthropic.Message
		stopped bool
	)
	var args map[int64]*strings.Builder // each tool_use block's arguments as the model streamed them
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			return Message{}, malformed(err) // events out of order: a broken gateway
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" && onDelta != nil {
				onDelta(Delta{Text: ev.Delta.Text})
			}
			if ev.Delta.Type == "input_json_delta" {
				if args == nil {
					args = map[int64]*strings.Builder{}
				}
				b := args[ev.Index]
				if b == nil {
					b = &strings.Builder{}
					args[ev.Index] = b
				}
				b.WriteString(ev.Delta.PartialJSON)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return Message{}, p.streamError(ctx, err, resp, started)
	}
	if !stopped {
		// A clean end before message_stop: the stream dropped without a word.
		return Message{}, policies.StreamDropped("", io.ErrUnexpectedEOF)
	}
	msg := Message{Role: Assistant, StopReason: anthropicStop(acc.StopReason), Usage: Usage{
		// Anthropic counts cached input apart; the GenAI input tokens are
		// all of the prompt's.
		InputTokens:  int(acc.Usage.InputTokens + acc.Usage.CacheCreationInputTokens + acc.Usage.CacheReadInputTokens),
		OutputTokens: int(acc.Usage.OutputTokens),
	}}
	for i, b := range acc.Content {
		switch b.Type {
		case "text":
			msg.Content += b.Text
		case "tool_use":
			arguments := string(b.Input)
			if raw, ok := args[int64(i)]; ok && !json.Valid([]byte(raw.String())) {
				// The accumulator makes garbled arguments "{}": the tool must
				// see what the model sent, and refuse it as invalid
				// arguments, so that the model is told to fix them.
				arguments = raw.String()
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: arguments})
		}
	}
	msg.Model, msg.ResponseID = string(acc.Model), acc.ID // the model that answered, which the session names if empty
	return msg, nil
}

// anthropicStop maps Anthropic's stop reasons to the session's; the ones it
// has no word for (pause_turn, refusal, …) are kept as they are.
func anthropicStop(r anthropic.StopReason) string {
	switch r {
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
		return StopEnd
	case anthropic.StopReasonMaxTokens:
		return StopLength
	case anthropic.StopReasonToolUse:
		return StopToolCalls
	}
	return string(r)
}

// streamError maps what the SDK reports to retrace's errors.
func (p *Anthropic) streamError(ctx context.Context, err error, resp *http.Response, started bool) error {
	if resp != nil && resp.StatusCode >= 400 {
		if _, read := errors.AsType[*anthropic.Error](err); !read && ctx.Err() != nil {
			return err // the caller's end, or the attempt timeout's, cut the reading of the body
		}
		// An error answer is decoded from its body (the part the limits let
		// the SDK read, which it puts back) by the function the HTTP layer
		// decodes it with: an *policies.Error with the status, Anthropic's
		// error type as its code, and the retry-after header.
		return policies.ErrorFrom(resp)
	}
	if e := ownStreamError(err); e != nil {
		return e // a limit passed, or an "event: error" read by the limits beneath the SDK
	}
	if e, ok := errors.AsType[*anthropic.Error](err); ok {
		return eventError([]byte(e.RawJSON())) // an error event the limits did not see
	}
	return readFailure(ctx, err, started)
}

// params is req as Messages API parameters: system messages become the
// system prompt; user messages and tool results are user turns, assistant
// messages assistant turns, consecutive messages of one side one turn (the
// API wants every tool result of a turn in the user turn after it). Empty
// texts are left out, as the API refuses them, and so is a turn left with
// nothing. A tool call's arguments that are not a JSON object are sent as
// {}: the API takes only an object, and the tool's answer, next in the
// history, already tells the model what was wrong with them.
func (p *Anthropic) params(req Request) (anthropic.MessageNewParams, error) {
	params := anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: p.maxTokens}
	var (
		side   string // the role of the turn being built: user or assistant
		blocks []anthropic.ContentBlockParamUnion
	)
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if side == Assistant {
			params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
		} else {
			params.Messages = append(params.Messages, anthropic.NewUserMessage(blocks...))
		}
		blocks = nil
	}
	turn := func(role string) {
		if role != side {
			flush()
			side = role
		}
	}
	for i, m := range req.Messages {
		switch m.Role {
		case System:
			if m.Content != "" {
				params.System = append(params.System, anthropic.TextBlockParam{Text: m.Content})
			}
		case User:
			turn(User)
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
		case ToolRole:
			turn(User)
			result := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Content != "" {
				result.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Content}}}
			}
			blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &result})
		case Assistant:
			turn(Assistant)
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, toolInput(tc.Arguments), tc.Name))
			}
		default:
			return params, &policies.Error{Class: policies.Permanent, Type: "invalid_request",
				Err: fmt.Errorf("session: message %d has role %q; want system, user, assistant or tool", i, m.Role)}
		}
	}
	flush()
	for _, t := range req.Tools {
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: inputSchema(t.Parameters)}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return params, nil
}

// toolInput is a tool call's arguments as the input of a tool_use block: the
// JSON object they are, or {}.
func toolInput(arguments string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(arguments), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(arguments)
}

// inputSchema is a tool's JSON schema as the SDK takes it: its properties
// and required fields in their own fields, the rest as extra fields. The
// schema's type is always "object", as the API requires.
func inputSchema(schema map[string]any) anthropic.ToolInputSchemaParam {
	var s anthropic.ToolInputSchemaParam
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			s.Properties = v
		case "required":
			switch r := v.(type) {
			case []string:
				s.Required = r
			case []any:
				for _, x := range r {
					if name, ok := x.(string); ok {
						s.Required = append(s.Required, name)
					}
				}
			}
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = map[string]any{}
			}
			s.ExtraFields[k] = v
		}
	}
	return s
}
