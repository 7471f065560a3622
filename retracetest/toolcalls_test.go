package retracetest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/retracetest"
)

// streamedCall is a tool call reassembled from a stream.
type streamedCall struct {
	id, typ, name, args string
	pieces              int // argument chunks
}

// parseToolStream checks a stream event by event: content chunks first, then
// for each call in order a chunk with its ID, type, name and empty arguments
// followed by argument chunks, then a finish chunk with an empty delta, the
// usage chunk when usage is set, and [DONE]. It returns the text, the calls,
// the finish chunk's data and the usage chunk.
func parseToolStream(t *testing.T, evs []string, usage bool) (string, []streamedCall, string, chunk) {
	t.Helper()
	require.NotEmpty(t, evs)
	require.Equal(t, "[DONE]", evs[len(evs)-1], "[DONE] is last")
	evs = evs[:len(evs)-1]
	var u chunk
	if usage {
		require.NotEmpty(t, evs)
		u = decodeChunk(t, evs[len(evs)-1])
		assert.Empty(t, u.Choices)
		require.NotNil(t, u.Usage)
		evs = evs[:len(evs)-1]
	}
	require.NotEmpty(t, evs)
	finish := evs[len(evs)-1]
	fc := decodeChunk(t, finish)
	require.Len(t, fc.Choices, 1)
	require.NotNil(t, fc.Choices[0].FinishReason)
	assert.Contains(t, finish, `"delta":{}`, "the finish chunk has an empty delta")
	assert.Nil(t, fc.Usage)
	evs = evs[:len(evs)-1]

	var text strings.Builder
	var calls []streamedCall
	for i, e := range evs {
		c := decodeChunk(t, e)
		require.Len(t, c.Choices, 1, e)
		ch := c.Choices[0]
		assert.Nil(t, ch.FinishReason, e)
		assert.Nil(t, c.Usage, e)
		if i == 0 {
			require.NotNil(t, ch.Delta.Role, "the first chunk carries the role: %s", e)
			assert.Equal(t, "assistant", *ch.Delta.Role)
		} else {
			assert.Nil(t, ch.Delta.Role, "only the first chunk carries the role: %s", e)
		}
		if ch.Delta.Content != nil {
			require.Empty(t, calls, "content comes before tool calls: %s", e)
			require.Empty(t, ch.Delta.ToolCalls, e)
			text.WriteString(*ch.Delta.Content)
			continue
		}
		require.Len(t, ch.Delta.ToolCalls, 1, e)
		tc := ch.Delta.ToolCalls[0]
		require.NotNil(t, tc.Index, e)
		require.NotNil(t, tc.Function.Arguments, "every tool-call delta carries arguments: %s", e)
		if tc.ID != nil {
			// The first chunk of a call.
			require.Equal(t, len(calls), *tc.Index, "calls come in order: %s", e)
			require.NotNil(t, tc.Type, e)
			require.NotNil(t, tc.Function.Name, e)
			assert.Empty(t, *tc.Function.Arguments, e)
			calls = append(calls, streamedCall{id: *tc.ID, typ: *tc.Type, name: *tc.Function.Name})
			continue
		}
		require.NotEmpty(t, calls, e)
		require.Equal(t, len(calls)-1, *tc.Index, "argument chunks follow their call's first chunk: %s", e)
		assert.Nil(t, tc.Type, e)
		assert.Nil(t, tc.Function.Name, e)
		assert.NotEmpty(t, *tc.Function.Arguments, e)
		calls[len(calls)-1].args += *tc.Function.Arguments
		calls[len(calls)-1].pieces++
	}
	return text.String(), calls, finish, u
}

func TestStreamingToolCalls(t *testing.T) {
	args0 := `{"query":"retry budget","limit":3}`
	args1 := `{"path":"docs/héllo wörld ✓.md"}`
	srv, c := start(t, retracetest.Always(retracetest.CallTools(
		retracetest.ToolCall{ID: "call_abc", Name: "search_docs", Arguments: args0},
		retracetest.ToolCall{Name: "read_file", Arguments: args1},
	)))
	resp := mustPost(t, c, srv.URL(), body(true, true))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)

	text, calls, finish, u := parseToolStream(t, evs, true)
	assert.Empty(t, text, "a CallTools answer has no text")
	require.Len(t, calls, 2)
	assert.Equal(t, streamedCall{id: "call_abc", typ: "function", name: "search_docs", args: args0, pieces: 3}, calls[0])
	assert.Equal(t, streamedCall{id: "call_0_1", typ: "function", name: "read_file", args: args1, pieces: 3}, calls[1],
		"an empty ID is generated from the request index and the call index")
	assert.Contains(t, finish, `"finish_reason":"tool_calls"`)
	assert.Equal(t, 3, u.Usage.PromptTokens)
	assert.Equal(t, len(strings.Fields(args0))+len(strings.Fields(args1)), u.Usage.CompletionTokens)
	assert.Equal(t, u.Usage.PromptTokens+u.Usage.CompletionTokens, u.Usage.TotalTokens)

	// The first event is exactly OpenAI's first tool-call chunk.
	assert.Contains(t, evs[0], `"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"search_docs","arguments":""}}]}`)
	assert.Contains(t, evs[1], `"delta":{"tool_calls":[{"index":0,"function":{"arguments":`)
	require.Len(t, evs, 2*(1+3)+3, "two calls of four chunks, finish, usage, [DONE]")

	// The same fault answers the next request with IDs of its own, and
	// without usage when none is asked for.
	resp = mustPost(t, c, srv.URL(), body(true, false))
	evs, err = events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	_, calls, _, _ = parseToolStream(t, evs, false)
	require.Len(t, calls, 2)
	assert.Equal(t, "call_abc", calls[0].id)
	assert.Equal(t, "call_1_1", calls[1].id)
}

func TestStreamingTextThenToolCalls(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.Reply("Let me look that up.").
		WithToolCalls(retracetest.ToolCall{ID: "c1", Type: "function", Name: "search_docs", Arguments: "{}"})))
	resp := mustPost(t, c, srv.URL(), body(true, false))
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	text, calls, finish, _ := parseToolStream(t, evs, false)
	assert.Equal(t, "Let me look that up.", text)
	assert.Equal(t, []streamedCall{{id: "c1", typ: "function", name: "search_docs", args: "{}", pieces: 2}}, calls)
	assert.Contains(t, finish, `"finish_reason":"tool_calls"`)
	n := len(retracetest.ReplyChunks("Let me look that up."))
	assert.Contains(t, evs[n], `"delta":{"tool_calls":[{"index":0,"id":"c1",`, "no role after content")
}

func TestEmptyArgumentsAreAnEmptyObject(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.CallTools(retracetest.ToolCall{Name: "now"})))
	resp := mustPost(t, c, srv.URL(), body(true, false))
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	_, calls, _, _ := parseToolStream(t, evs, false)
	assert.Equal(t, []streamedCall{{id: "call_0_0", typ: "function", name: "now", args: "{}", pieces: 2}}, calls)
}

type toolCompletion struct {
	Choices []struct {
		Message struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestNonStreamingToolCalls(t *testing.T) {
	args := `{"query":"retry budget"}`
	srv, c := start(t, retracetest.Sequence(
		retracetest.CallTools(retracetest.ToolCall{ID: "call_x", Name: "search_docs", Arguments: args}, retracetest.ToolCall{Name: "now"}),
		retracetest.Reply("Checking.").WithToolCalls(retracetest.ToolCall{Name: "search_docs", Arguments: args}),
		retracetest.OK(),
	))
	resp := mustPost(t, c, srv.URL(), body(false, false))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_x","type":"function","function":{"name":"search_docs","arguments":"{\"query\":\"retry budget\"}"}},`)
	var got toolCompletion
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Len(t, got.Choices, 1)
	m := got.Choices[0].Message
	assert.Equal(t, "assistant", m.Role)
	assert.Nil(t, m.Content)
	require.Len(t, m.ToolCalls, 2)
	assert.Equal(t, "call_x", m.ToolCalls[0].ID)
	assert.Equal(t, "function", m.ToolCalls[0].Type)
	assert.Equal(t, "search_docs", m.ToolCalls[0].Function.Name)
	assert.Equal(t, args, m.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "call_0_1", m.ToolCalls[1].ID)
	assert.Equal(t, "now", m.ToolCalls[1].Function.Name)
	assert.Equal(t, "{}", m.ToolCalls[1].Function.Arguments)
	assert.Equal(t, "tool_calls", got.Choices[0].FinishReason)
	assert.Equal(t, 3, got.Usage.PromptTokens)
	assert.Equal(t, 3, got.Usage.CompletionTokens, "two words of arguments and one of {}")
	assert.Equal(t, 6, got.Usage.TotalTokens)

	// Text and tool calls.
	resp = mustPost(t, c, srv.URL(), body(false, false))
	got = toolCompletion{}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	m = got.Choices[0].Message
	require.NotNil(t, m.Content)
	assert.Equal(t, "Checking.", *m.Content)
	require.Len(t, m.ToolCalls, 1)
	assert.Equal(t, "call_1_0", m.ToolCalls[0].ID)
	assert.Equal(t, "tool_calls", got.Choices[0].FinishReason)
	assert.Equal(t, 3, got.Usage.CompletionTokens)

	// A plain success has no tool_calls and stops.
	resp = mustPost(t, c, srv.URL(), body(false, false))
	raw, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "tool_calls")
	assert.Contains(t, string(raw), `"finish_reason":"stop"`)
}

func TestBrokenToolCallStreams(t *testing.T) {
	call := retracetest.ToolCall{ID: "c1", Name: "search_docs", Arguments: `{"query":"x"}`}
	srv, c := start(t, retracetest.Sequence(
		retracetest.StreamEOF(2).WithToolCalls(call),
		retracetest.Malformed().WithToolCalls(call),
	))
	// The call's first chunk and the first piece of its arguments.
	resp := mustPost(t, c, srv.URL(), body(true, false))
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, evs, 2)
	assert.Contains(t, evs[0], `"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"search_docs","arguments":""}}]}`)
	assert.Contains(t, evs[1], `"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"qu"}}]}`)

	resp = mustPost(t, c, srv.URL(), body(true, false))
	evs, err = events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, evs, 3)
	assert.Contains(t, evs[0], `"tool_calls":[{"index":0,"id":"c1"`)
	assert.False(t, json.Valid([]byte(evs[1])))
	assert.Equal(t, "[DONE]", evs[2])
}

func TestToolFaultStrings(t *testing.T) {
	a := retracetest.ToolCall{Name: "search_docs"}
	b := retracetest.ToolCall{Name: "read_file"}
	assert.Equal(t, "tool calls: search_docs", retracetest.CallTools(a).String())
	assert.Equal(t, "tool calls: search_docs, read_file", retracetest.Reply("hm").WithToolCalls(a, b).String())
	assert.Equal(t, "tool calls: search_docs after 1s", retracetest.CallTools(a).WithDelay(1e9).String())
	assert.Equal(t, "eof after 2 chunks (tool calls: search_docs)", retracetest.StreamEOF(2).WithToolCalls(a).String())
	assert.Equal(t, "ok", retracetest.OK().String())

	// The constructors copy their arguments.
	calls := []retracetest.ToolCall{a}
	f := retracetest.CallTools(calls...)
	g := retracetest.OK().WithToolCalls(calls...)
	calls[0].Name = "changed"
	assert.Equal(t, "search_docs", f.ToolCalls[0].Name)
	assert.Equal(t, "search_docs", g.ToolCalls[0].Name)
	assert.Equal(t, retracetest.OK().WithToolCalls(a), f, "a success")
	assert.Empty(t, f.Reply)
}

func TestRequestTools(t *testing.T) {
	seen := make(chan []string, 2)
	srv, c := start(t, func(_ int, req retracetest.Request) retracetest.Fault {
		seen <- req.Tools
		return retracetest.OK()
	})
	reqBody := `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}],"tools":[` +
		`{"type":"function","function":{"name":"search_docs","description":"Search the docs.","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}},` +
		`{"type":"custom","custom":{"name":"patch"}},` +
		`{"type":"function","function":{"name":"read_file"}}]}`
	resp := mustPost(t, c, srv.URL(), reqBody)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	want := []string{"search_docs", "patch", "read_file"}
	assert.Equal(t, want, <-seen, "the script sees the tools")
	got := srv.Received()
	require.Len(t, got, 1)
	assert.Equal(t, want, got[0].Tools)
	got[0].Tools[0] = "changed"
	assert.Equal(t, want, srv.Received()[0].Tools, "Received returns copies")

	resp = mustPost(t, c, srv.URL(), body(false, false))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Nil(t, srv.Received()[1].Tools)
	assert.Nil(t, <-seen)
}

// searchModel plays a model that searches the docs until a search finds
// something, then answers with what it found.
func searchModel(_ int, req retracetest.Request) retracetest.Fault {
	if !slices.Contains(req.Tools, "search_docs") {
		return retracetest.Reply("I have no way to search.")
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != "tool" {
			continue
		}
		if strings.HasPrefix(m.Content, "found:") {
			return retracetest.Reply("The answer is " + strings.TrimSpace(strings.TrimPrefix(m.Content, "found:")) + ".")
		}
		return retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"retry budget","page":2}`})
	}
	return retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"retry budget"}`})
}

func TestScriptDecidesFromLastToolMessage(t *testing.T) {
	srv, c := start(t, searchModel)
	tools := `"tools":[{"type":"function","function":{"name":"search_docs"}}]`
	user := `{"role":"user","content":"what is a retry budget?"}`
	call := func(id, args string) string {
		return `{"role":"assistant","content":null,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"search_docs","arguments":` + args + `}}]}`
	}
	ask := func(messages ...string) toolCompletion {
		t.Helper()
		resp := mustPost(t, c, srv.URL(), `{"model":"gpt-test",`+tools+`,"messages":[`+strings.Join(messages, ",")+`]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var got toolCompletion
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		require.Len(t, got.Choices, 1)
		return got
	}

	got := ask(user)
	require.Len(t, got.Choices[0].Message.ToolCalls, 1)
	first := got.Choices[0].Message.ToolCalls[0]
	assert.Equal(t, "call_0_0", first.ID)
	assert.Equal(t, `{"query":"retry budget"}`, first.Function.Arguments)

	argsJSON, err := json.Marshal(first.Function.Arguments)
	require.NoError(t, err)
	got = ask(user, call(first.ID, string(argsJSON)), `{"role":"tool","tool_call_id":"call_0_0","content":"nothing on page 1"}`)
	require.Len(t, got.Choices[0].Message.ToolCalls, 1)
	second := got.Choices[0].Message.ToolCalls[0]
	assert.Equal(t, "call_1_0", second.ID)
	assert.Equal(t, `{"query":"retry budget","page":2}`, second.Function.Arguments)

	got = ask(user,
		call(first.ID, string(argsJSON)), `{"role":"tool","tool_call_id":"call_0_0","content":"nothing on page 1"}`,
		call(second.ID, `"{}"`), `{"role":"tool","tool_call_id":"call_1_0","content":"found: a cap on retries per request"}`)
	assert.Empty(t, got.Choices[0].Message.ToolCalls)
	require.NotNil(t, got.Choices[0].Message.Content)
	assert.Equal(t, "The answer is a cap on retries per request.", *got.Choices[0].Message.Content)
	assert.Equal(t, "stop", got.Choices[0].FinishReason)

	last := srv.Received()[2]
	require.Len(t, last.Messages, 5)
	assert.Equal(t, retracetest.Message{Role: "assistant", ToolCalls: []retracetest.ToolCall{
		{ID: "call_1_0", Type: "function", Name: "search_docs", Arguments: "{}"}}}, last.Messages[3])
	assert.Equal(t, retracetest.Message{Role: "tool", ToolCallID: "call_1_0", Content: "found: a cap on retries per request"}, last.Messages[4])
}

func TestOpenAIClientToolCalls(t *testing.T) {
	srv, hc := start(t, searchModel)
	client := openai.NewClient(
		option.WithBaseURL(srv.URL()),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(hc),
	)
	ctx := context.Background()
	tools := []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "search_docs"}),
	}
	user := openai.UserMessage("what is a retry budget?")

	// A streamed tool call, accumulated by the SDK.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "gpt-test",
		Messages:      []openai.ChatCompletionMessageParamUnion{user},
		Tools:         tools,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	var finished []openai.FinishedChatCompletionToolCall
	for stream.Next() {
		require.True(t, acc.AddChunk(stream.Current()))
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc)
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Len(t, acc.Choices, 1)
	msg := acc.Choices[0].Message
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	assert.Empty(t, msg.Content)
	require.Len(t, msg.ToolCalls, 1)
	tc := msg.ToolCalls[0]
	assert.Equal(t, "call_0_0", tc.ID)
	assert.Equal(t, "function", tc.Type)
	assert.Equal(t, "search_docs", tc.Function.Name)
	assert.Equal(t, `{"query":"retry budget"}`, tc.Function.Arguments)
	require.Len(t, finished, 1)
	assert.Equal(t, "call_0_0", finished[0].ID)
	assert.Equal(t, `{"query":"retry budget"}`, finished[0].Arguments)
	assert.EqualValues(t, 2, acc.Usage.CompletionTokens)

	// The follow-up carries the assistant's call and the tool's answer.
	followUp := []openai.ChatCompletionMessageParamUnion{
		user,
		{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
			ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name: tc.Function.Name, Arguments: tc.Function.Arguments,
					},
				},
			}},
		}},
		openai.ToolMessage("found: a cap on retries per request", tc.ID),
	}
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-test", Messages: followUp, Tools: tools,
	})
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, "The answer is a cap on retries per request.", resp.Choices[0].Message.Content)
	assert.Equal(t, "stop", resp.Choices[0].FinishReason)
	assert.Empty(t, resp.Choices[0].Message.ToolCalls)

	got := srv.Received()
	require.Len(t, got, 2)
	assert.Equal(t, []string{"search_docs"}, got[0].Tools)
	assert.True(t, got[0].Stream)
	assert.True(t, got[0].IncludeUsage)
	r := got[1]
	assert.Equal(t, []string{"search_docs"}, r.Tools)
	require.Len(t, r.Messages, 3)
	assert.Equal(t, retracetest.Message{Role: "user", Content: "what is a retry budget?"}, r.Messages[0])
	assert.Equal(t, "assistant", r.Messages[1].Role)
	assert.Equal(t, []retracetest.ToolCall{{ID: "call_0_0", Type: "function", Name: "search_docs", Arguments: `{"query":"retry budget"}`}}, r.Messages[1].ToolCalls)
	assert.Equal(t, "tool", r.Messages[2].Role)
	assert.Equal(t, "call_0_0", r.Messages[2].ToolCallID)
	assert.Equal(t, "found: a cap on retries per request", r.Messages[2].Content)

	// A non-streamed tool call with null content parses in the SDK too.
	srv.SetScript(retracetest.Always(retracetest.CallTools(retracetest.ToolCall{ID: "call_n", Name: "search_docs", Arguments: `{"query":"n"}`})))
	resp, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{user}, Tools: tools,
	})
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
	assert.Empty(t, resp.Choices[0].Message.Content)
	require.Len(t, resp.Choices[0].Message.ToolCalls, 1)
	assert.Equal(t, "call_n", resp.Choices[0].Message.ToolCalls[0].ID)
	assert.Equal(t, `{"query":"n"}`, resp.Choices[0].Message.ToolCalls[0].Function.Arguments)
}
