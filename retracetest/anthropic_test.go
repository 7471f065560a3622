package retracetest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/retracetest"
)

// sse is one server-sent event: its name and its data.
type sse struct {
	name, data string
}

// namedEvents reads server-sent events with their names until the body
// ends, and the error that ended it (io.EOF for a clean end).
func namedEvents(r io.Reader) ([]sse, error) {
	br := bufio.NewReader(r)
	var out []sse
	var cur sse
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				err = io.ErrUnexpectedEOF
			}
			return out, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			out, cur = append(out, cur), sse{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			return out, fmt.Errorf("not an event line: %q", line)
		}
	}
}

func names(evs []sse) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
	}
	return out
}

func postMessages(t *testing.T, c *http.Client, srv *retracetest.Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.AnthropicURL()+"/v1/messages", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-ant-test-secret-wxyz")
	resp, err := c.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func messagesBody(stream bool) string {
	return fmt.Sprintf(`{"model":"claude-test","max_tokens":64,"stream":%t,"messages":[{"role":"user","content":"say hello please"}]}`, stream)
}

// anthropicClient is the real anthropic-sdk-go client against srv, its
// retries off.
func anthropicClient(srv *retracetest.Server, hc *http.Client) anthropic.Client {
	return anthropic.NewClient(
		aoption.WithoutEnvironmentDefaults(),
		aoption.WithBaseURL(srv.AnthropicURL()),
		aoption.WithAPIKey("sk-ant-test"),
		aoption.WithMaxRetries(0),
		aoption.WithHTTPClient(hc),
		aoption.WithoutOpenTelemetry(),
	)
}

// A success streams Anthropic's events in Anthropic's order.
func TestAnthropicStreamingEvents(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.Reply("Hello there, friend.")))
	resp := postMessages(t, c, srv, messagesBody(true))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, "req_0", resp.Header.Get("Request-Id"))
	evs, err := namedEvents(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, []string{"message_start", "ping", "content_block_start",
		"content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}, names(evs))
	for _, e := range evs {
		var typed struct {
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal([]byte(e.data), &typed), e.data)
		assert.Equal(t, e.name, typed.Type, "the data's type is the event's name")
	}
	var begin struct {
		Message struct {
			ID    string `json:"id"`
			Model string `json:"model"`
			Usage struct {
				InputTokens int `json:"input_tokens"`
			} `json:"usage"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal([]byte(evs[0].data), &begin))
	assert.Equal(t, "msg_0", begin.Message.ID)
	assert.Equal(t, "claude-test", begin.Message.Model)
	assert.Equal(t, 3, begin.Message.Usage.InputTokens, "the prompt's words")
	assert.JSONEq(t, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there,"}}`, evs[4].data)
	assert.JSONEq(t, `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}`, evs[7].data)
}

// The real SDK accumulates a streamed text and tool call, and sends the
// call and its result back, which the server decodes into the same Request
// an OpenAI client's would make.
func TestAnthropicSDKToolUseRoundTrip(t *testing.T) {
	srv, hc := start(t, searchModel)
	client := anthropicClient(srv, hc)
	ctx := context.Background()
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
		Name: "search_docs", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"query": map[string]any{"type": "string"}}},
	}}}
	user := anthropic.NewUserMessage(anthropic.NewTextBlock("what is a retry budget?"))
	params := anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 256, Tools: tools,
		System:   []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages: []anthropic.MessageParam{user},
	}

	stream := client.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Equal(t, anthropic.StopReasonToolUse, acc.StopReason)
	require.Len(t, acc.Content, 1)
	call := acc.Content[0]
	assert.Equal(t, "tool_use", call.Type)
	assert.Equal(t, "toolu_0_0", call.ID)
	assert.Equal(t, "search_docs", call.Name)
	assert.JSONEq(t, `{"query":"retry budget"}`, string(call.Input))
	assert.EqualValues(t, 2, acc.Usage.OutputTokens)
	assert.EqualValues(t, 8, acc.Usage.InputTokens, "the system prompt's and the question's words")

	params.Messages = append(params.Messages, acc.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "found: a cap on retries per request", false)))
	resp, err := client.Messages.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, anthropic.StopReasonEndTurn, resp.StopReason)
	require.Len(t, resp.Content, 1)
	assert.Equal(t, "The answer is a cap on retries per request.", resp.Content[0].Text)

	got := srv.Received()
	require.Len(t, got, 2)
	assert.Equal(t, "/v1/messages", got[0].Path)
	assert.True(t, got[0].Stream)
	assert.False(t, got[1].Stream)
	assert.Equal(t, []string{"search_docs"}, got[1].Tools)
	assert.Equal(t, "claude-test", got[1].Model)
	assert.Equal(t, []retracetest.Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "what is a retry budget?"},
		{Role: "assistant", ToolCalls: []retracetest.ToolCall{{ID: "toolu_0_0", Type: "function", Name: "search_docs", Arguments: `{"query":"retry budget"}`}}},
		{Role: "tool", ToolCallID: "toolu_0_0", Content: "found: a cap on retries per request"},
	}, got[1].Messages)
	assert.Equal(t, "Bearer ***test", got[0].Header.Get("Authorization"), "the key was sent, and is masked in the log")
}

// Text and tool calls in one answer are separate blocks, in order.
func TestAnthropicTextThenToolUse(t *testing.T) {
	srv, hc := start(t, retracetest.Always(retracetest.Reply("Let me look.").WithToolCalls(
		retracetest.ToolCall{ID: "toolu_a", Name: "search_docs", Arguments: `{"q":"a"}`},
		retracetest.ToolCall{Name: "search_cache"})))
	client := anthropicClient(srv, hc)
	stream := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Len(t, acc.Content, 3)
	assert.Equal(t, "Let me look.", acc.Content[0].Text)
	assert.Equal(t, "toolu_a", acc.Content[1].ID)
	assert.JSONEq(t, `{"q":"a"}`, string(acc.Content[1].Input))
	assert.Equal(t, "toolu_0_1", acc.Content[2].ID)
	assert.JSONEq(t, `{}`, string(acc.Content[2].Input))
	assert.Equal(t, anthropic.StopReasonToolUse, acc.StopReason)
}

// The SDK reads the error answers as Anthropic's: its error type and status
// (InsufficientQuota is Anthropic's 402 billing_error there).
func TestAnthropicSDKReadsErrors(t *testing.T) {
	srv, hc := start(t, retracetest.Always(retracetest.InsufficientQuota()))
	client := anthropicClient(srv, hc)
	_, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	apiErr, ok := err.(*anthropic.Error)
	require.True(t, ok, "%T %v", err, err)
	assert.Equal(t, 402, apiErr.StatusCode)
	assert.EqualValues(t, "billing_error", apiErr.Type())
	assert.Equal(t, "req_0", apiErr.RequestID)
}

// The mid-stream error is Anthropic's "event: error" after the deltas sent.
func TestAnthropicErrorEvent(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.ErrorEvent(2, "", "overloaded_error", "Overloaded")))
	resp := postMessages(t, c, srv, messagesBody(true))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs, err := namedEvents(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta", "error"}, names(evs))
	assert.JSONEq(t, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, evs[len(evs)-1].data)

	// The SDK ends the stream with the error.
	client := anthropicClient(srv, c)
	stream := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	n := 0
	for stream.Next() {
		n++
	}
	require.NoError(t, stream.Close())
	apiErr, ok := stream.Err().(*anthropic.Error)
	require.True(t, ok, "%T %v", stream.Err(), stream.Err())
	assert.EqualValues(t, "overloaded_error", apiErr.Type())
	assert.Equal(t, 4, n, "message_start, a block start and two deltas came before it")

	// Without a stream, the error answer.
	resp = postMessages(t, c, srv, messagesBody(false))
	assert.Equal(t, 500, resp.StatusCode)
}

// A dropped stream ends without message_delta and message_stop.
func TestAnthropicStreamEOF(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.StreamEOF(1).WithReply("one two three")))
	resp := postMessages(t, c, srv, messagesBody(true))
	evs, err := namedEvents(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta"}, names(evs))

	srv.SetScript(retracetest.Always(retracetest.StreamEOF(99).WithReply("one two")))
	resp = postMessages(t, c, srv, messagesBody(true))
	evs, err = namedEvents(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"}, names(evs),
		"every delta, but no message_delta or message_stop")

	srv.SetScript(retracetest.Always(retracetest.StreamEOF(1)))
	resp = postMessages(t, c, srv, messagesBody(false))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.False(t, json.Valid(b), "half a message object: %s", b)
}

// A reset cuts the connection after the deltas sent.
func TestAnthropicStreamReset(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.StreamReset(1)))
	resp := postMessages(t, c, srv, messagesBody(true))
	evs, err := namedEvents(resp.Body)
	require.Error(t, err)
	assert.NotErrorIs(t, err, io.EOF)
	assert.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta"}, names(evs))
}

func TestAnthropicMalformed(t *testing.T) {
	srv, hc := start(t, retracetest.Always(retracetest.Malformed()))
	client := anthropicClient(srv, hc)
	stream := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	for stream.Next() {
	}
	require.NoError(t, stream.Close())
	var syn *json.SyntaxError
	assert.ErrorAs(t, stream.Err(), &syn)
}

// A request the real API refuses is refused here too, in Anthropic's shape.
func TestAnthropicInvalidRequests(t *testing.T) {
	srv, c := start(t, nil)
	for name, body := range map[string]string{
		"no max_tokens": `{"model":"claude-test","messages":[{"role":"user","content":"hi"}]}`,
		"system role":   `{"model":"claude-test","max_tokens":8,"messages":[{"role":"system","content":"be terse"}]}`,
		"not JSON":      `{"model":`,
		"bad content":   `{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":7}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			resp := postMessages(t, c, srv, body)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type string `json:"type"`
				} `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			assert.Equal(t, "error", e.Type)
			assert.Equal(t, "invalid_request_error", e.Error.Type)
		})
	}
	assert.Equal(t, 4, srv.Requests(), "invalid requests are counted too")
	for _, r := range srv.Received() {
		assert.Error(t, r.Err)
	}
}

// Both paths of the Messages API answer; the base URL has no /v1.
func TestAnthropicPaths(t *testing.T) {
	srv, c := start(t, nil)
	assert.Equal(t, strings.TrimSuffix(srv.URL(), "/v1"), srv.AnthropicURL())
	for _, path := range []string{"/v1/messages", "/messages"} {
		req, err := http.NewRequest(http.MethodPost, srv.AnthropicURL()+path, strings.NewReader(messagesBody(false)))
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		var m struct {
			Type       string `json:"type"`
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		_ = resp.Body.Close()
		assert.Equal(t, "message", m.Type, path)
		assert.Equal(t, "end_turn", m.StopReason)
		require.Len(t, m.Content, 1)
		assert.Equal(t, retracetest.DefaultReply, m.Content[0].Text)
	}
	assert.Empty(t, retracetest.New(nil).AnthropicURL(), "before Start")
}
