package retracemcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	retracemcp "github.com/retrace-go/retrace/contrib/mcp"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/tool"
)

// peerRig is a client under retrace connected to the reference server
// (@modelcontextprotocol/server-everything, TypeScript), the way a user
// connects: one Client.Connect, the tools through Server.Tools.
type peerRig struct {
	*rig
	p          peerDir
	tr         transport
	received   *received
	mu         sync.Mutex
	servers    []*everything
	progressed chan struct{} // a value per progress notification the client handled
}

// awaitProgress waits for n progress notifications.
func (pr *peerRig) awaitProgress(n int) error {
	guard := time.NewTimer(60 * time.Second) // a guard: sent with the answer, or never
	defer guard.Stop()
	for i := range n {
		select {
		case <-pr.progressed:
		case <-guard.C:
			return fmt.Errorf("%d progress notifications of %d", i, n)
		}
	}
	return nil
}

func newPeerRig(t *testing.T, tr transport) *peerRig {
	t.Helper()
	p := peers(t)
	pr := &peerRig{rig: newRig(t, retracemcp.Config{}), p: p, tr: tr, received: newReceived(), progressed: make(chan struct{}, 64)}
	// A client as a user makes it: it handles progress, and URL
	// elicitations, so that the server offers the tool that asks for one.
	pr.client = mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { pr.progressed <- struct{}{} },
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{
			Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}}},
	})
	return pr
}

// start starts a server process and connects a session to it.
func (pr *peerRig) start(t *testing.T, ctx context.Context) (*mcp.ClientSession, error) {
	e := startEverything(t, pr.p, pr.tr, pr.received)
	pr.mu.Lock()
	pr.servers = append(pr.servers, e)
	pr.mu.Unlock()
	return pr.rc.Connect(ctx, pr.client, e.connectTransport(), nil)
}

// last is the server process started last.
func (pr *peerRig) last() *everything {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.servers[len(pr.servers)-1]
}

// peerCase is one row of the reference server's table: a call, what the
// server does to it, and how it must read.
type peerCase struct {
	name    string
	tool    string
	args    string
	restart bool // the server comes from Client.Start, else Client.Attach
	// before runs ahead of the traced call (a call that succeeds, a kill).
	before func(t *testing.T, pr *peerRig, srv *retracemcp.Server, tools []*tool.Tool)
	// during runs beside the traced call (a kill once the server has it),
	// given the calls of the tool the servers had received before it.
	during  func(pr *peerRig, before int) error
	direct  bool   // the call is made on the session (cs.CallTool), not through the tool
	class   string // the model's failure class, "" for a success
	errType string // error.type on the tool layer
	outcome string
	calls   int    // tools/call requests the servers received during the call = leaf spans = retrace.calls
	content string // a part of what the caller reads
	hint    string // a part of the hint the model reads
}

const mib = 1 << 20

var peerCases = []peerCase{
	{name: "echo", tool: "echo", args: `{"message":"hi"}`, outcome: "success", calls: 1, content: "Echo: hi"},
	{name: "get-sum", tool: "get-sum", args: `{"a":2,"b":3}`, outcome: "success", calls: 1, content: "The sum of 2 and 3 is 5."},
	{name: "progress, with a token", tool: "trigger-long-running-operation", args: `{"duration":0.1,"steps":5}`, direct: true,
		outcome: "success", calls: 1, content: "Long running operation completed"},
	{name: "isError from the tool", tool: "gzip-file-as-resource", args: `{"data":"ftp://example.com/notes.txt"}`,
		class: "unknown", errType: "tool_error", outcome: "failed_unknown", calls: 1, content: "Unsupported URL protocol"},
	{name: "invalid arguments", tool: "get-sum", args: `{"a":"two","b":3}`,
		class: "permanent", errType: "invalid_arguments", outcome: "failed_permanent", calls: 1, content: "the arguments were not valid for get-sum"},
	{name: "unknown tool", tool: "no-such-tool", args: `{}`, direct: true,
		class: "programming", errType: "-32602", outcome: "failed_permanent", calls: 1, content: "Tool no-such-tool not found"},
	{name: "URL elicitation required (-32042)", tool: "trigger-url-elicitation", args: `{"url":"https://example.com/consent","errorPath":true}`,
		class: "user_action", errType: "-32042", outcome: "failed_user_action", calls: 1, content: "The user must open https://modelcontextprotocol.io",
		hint: "trigger-url-elicitation needs the user to act first (-32042): ask the user to do what the message says (open its link), then call trigger-url-elicitation again with the same arguments"},
	{name: "70 KiB argument", tool: "echo", args: `{"message":"` + strings.Repeat("x", 70<<10) + `"}`, outcome: "success", calls: 1, content: "Echo: xxx"},
	{name: "1 MiB result", tool: "echo", args: `{"message":"` + strings.Repeat("y", mib) + `"}`, outcome: "success", calls: 1, content: "Echo: yyy"},
	{name: "killed mid-call", tool: "trigger-long-running-operation", args: `{"duration":60,"steps":1}`,
		during: killOnceReceived("trigger-long-running-operation"),
		class:  "fatal", errType: "connection_closed", outcome: "failed_fatal", calls: 1, content: "cannot be used for the rest of this task"},
	{name: "killed mid-call, restarted", tool: "trigger-long-running-operation", args: `{"duration":0.5,"steps":1}`, restart: true,
		during:  killOnceReceived("trigger-long-running-operation"),
		outcome: "success_after_retry", calls: 2, content: "Long running operation completed"},
	{name: "killed idle", tool: "echo", args: `{"message":"again"}`, before: killIdle,
		class: "fatal", errType: "connection_closed", outcome: "failed_fatal", calls: 0, content: "the MCP session has ended",
		hint: "echo cannot be used for the rest of this task (connection_closed): do not call it again"},
	{name: "killed idle, restarted", tool: "echo", args: `{"message":"again"}`, restart: true, before: killIdle,
		outcome: "success_after_retry", calls: 1, content: "Echo: again"},
}

// killOnceReceived kills the server once it has received the call of tool.
func killOnceReceived(tool string) func(pr *peerRig, before int) error {
	return func(pr *peerRig, before int) error {
		if err := pr.received.wait(tool, before+1); err != nil {
			return err
		}
		pr.last().kill()
		return nil
	}
}

// killIdle makes a call that succeeds, then kills the server between calls.
func killIdle(t *testing.T, pr *peerRig, _ *retracemcp.Server, tools []*tool.Tool) {
	res := toolNamed(t, tools, "echo").Invoke(context.Background(), `{"message":"first"}`)
	require.Nil(t, res.Failure, res.Content)
	pr.last().kill()
}

// TestReferenceServer runs the table against the reference server, over
// stdio and over Streamable HTTP (with the SDK's standalone stream, as a
// user's client has it): each call's class, what its caller reads, and the
// counts, tools/call requests the server received (what crossed into its
// pipe, what the proxy in front of it delivered) = leaf spans =
// retrace.calls, with the session's handshakes and notifications counted
// apart.
func TestReferenceServer(t *testing.T) {
	var table []string
	for _, tr := range []transport{overStdio, overHTTP} {
		for _, c := range peerCases {
			t.Run(string(tr)+"/"+c.name, func(t *testing.T) {
				pr := newPeerRig(t, tr)
				ctx := context.Background()
				var srv *retracemcp.Server
				if c.restart {
					var err error
					srv, err = pr.rc.Start(ctx, func(ctx context.Context) (*mcp.ClientSession, error) { return pr.start(t, ctx) })
					require.NoError(t, err)
				} else {
					cs, err := pr.start(t, ctx)
					require.NoError(t, err)
					srv = pr.rc.Attach(cs)
				}
				t.Cleanup(func() { _ = srv.Session().Close() })
				tools, err := srv.Tools(ctx)
				require.NoError(t, err)
				if c.before != nil {
					c.before(t, pr, srv, tools)
				}
				before := pr.received.calls(c.tool)

				done := make(chan error, 1)
				if c.during != nil {
					go func() { done <- c.during(pr, before) }()
				} else {
					done <- nil
				}
				var read string
				var failed bool
				var failure *tool.Failure // what the model read, for a call through the tool
				spans := pr.task(t, ctx, func(ctx context.Context) {
					if c.direct {
						read, failed = callDirect(t, ctx, srv.Session(), c.tool, c.args)
						return
					}
					res := toolNamed(t, tools, c.tool).Invoke(ctx, c.args)
					read, failure, failed = res.Content, res.Failure, res.Failure != nil
				})
				require.NoError(t, <-done)

				received := pr.received.calls(c.tool) - before
				counts, err := retracetest.TraceCounts(spans)
				require.NoError(t, err)
				assert.Equal(t, c.calls, received, "tools/call requests the server received")
				if !assert.Equal(t, received, counts.LeafSpans, "leaf spans = requests received") ||
					!assert.Equal(t, int64(received), counts.Calls, "retrace.calls = requests received") {
					logTree(t, spans)
				}
				assert.GreaterOrEqual(t, counts.WorstCase, counts.Calls)

				layer := spansNamed(spans, "execute_tool "+c.tool)
				require.Len(t, layer, 1)
				assert.Equal(t, c.outcome, attr(layer[0], "retrace.outcome"))
				assert.Equal(t, c.errType, attr(layer[0], "error.type"))
				assert.Equal(t, c.class, attr(layer[0], "retrace.error.class"))
				assert.Equal(t, c.class != "", failed, read)
				if failure != nil {
					assert.Equal(t, c.class, failure.Class, "the class the model reads")
					assert.Contains(t, failure.Hint, c.hint)
				}
				assert.Contains(t, read, c.content)
				checkRequestSpans(t, spans, c.tool)
				// Every handshake and notification the task made is a
				// span that says why it is not counted.
				uncounted := map[string]int{}
				for _, s := range spans {
					if why := attr(s, "retrace.uncounted"); why != "" {
						uncounted[why]++
					}
				}
				total := 0
				for _, n := range uncounted {
					total += n
				}
				assert.Equal(t, int64(total), rootInt(spans, "retrace.calls.uncounted"))
				if c.restart && strings.HasPrefix(c.name, "killed") {
					assert.Equal(t, 1, srv.Restarts())
					assert.Positive(t, uncounted["handshake"], "the restart's handshake, inside the call's trace")
				}
				if c.name == "progress, with a token" {
					// Each notification is handled apart from the answer:
					// the last may be handled after the call returned.
					require.NoError(t, pr.awaitProgress(5))
				}
				var ids []string
				for _, s := range spansNamed(spans, "tools/call "+c.tool) {
					ids = append(ids, orDash(attr(s, "jsonrpc.request.id")))
				}
				table = append(table, fmt.Sprintf("| %s | %s | %d | %s %s | %d | %d | %v | %s |", c.name, tr, received,
					orDash(c.class), orDash(c.errType), counts.Calls, counts.LeafSpans, uncounted, strings.Join(ids, ", ")))
			})
		}
	}
	sort.Strings(table)
	if os.Getenv("RETRACEMCP_TABLE") != "" {
		t.Log("\n| fault | transport | tools/call received | class error.type | retrace.calls | leaf spans | uncounted | jsonrpc.request.id |\n|---|---|---|---|---|---|---|---|\n" + strings.Join(table, "\n"))
	}
}

// callDirect calls a tool on the session, as a caller of the SDK does (the
// middleware governs it), with a progress token, and returns what the
// caller reads, and whether the call failed.
func callDirect(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name, args string) (string, bool) {
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(args), &m))
	p := &mcp.CallToolParams{Name: name, Arguments: m}
	p.SetProgressToken("progress-1")
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return err.Error(), true
	}
	return retracemcp.Text(res), res.IsError
}

// checkRequestSpans checks the request spans of tool: a span that was sent
// carries its request id, whatever the size of its body; one that was not
// says so.
func checkRequestSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, tool string) {
	t.Helper()
	for _, s := range spansNamed(spans, "tools/call "+tool) {
		if attr(s, "retrace.uncounted") == "unsent" {
			continue
		}
		assert.NotEmpty(t, attr(s, "jsonrpc.request.id"), "a sent request's id")
		assert.NotEmpty(t, attr(s, "network.transport"))
	}
}

// A connect is no failure: the SDK first asks server/discover, which a
// server of an earlier protocol version declines (-32601 over stdio, an
// HTTP 400 over Streamable HTTP), then initializes. In a trace, the
// handshake's spans end well and are not counted as calls.
func TestConnectLeavesNoErrorSpan(t *testing.T) {
	for _, tr := range []transport{overStdio, overHTTP} {
		t.Run(string(tr), func(t *testing.T) {
			pr := newPeerRig(t, tr)
			var cs *mcp.ClientSession
			spans := pr.task(t, context.Background(), func(ctx context.Context) {
				var err error
				cs, err = pr.start(t, ctx)
				require.NoError(t, err)
			})
			t.Cleanup(func() { _ = cs.Close() })
			require.Equal(t, 1, pr.received.method("server/discover"), "the SDK asked")
			require.Equal(t, 1, pr.received.method("initialize"), "and fell back")
			discover := spansNamed(spans, "server/discover")
			require.Len(t, discover, 1)
			assert.Equal(t, "success", attr(discover[0], "retrace.outcome"))
			// The server's answer, said: its JSON-RPC code, or its HTTP status.
			switch tr {
			case overStdio:
				assert.Equal(t, "-32601", attr(discover[0], "rpc.response.status_code"))
			case overHTTP:
				assert.Equal(t, "400", attr(discover[0], "http.response.status_code"))
			}
			for _, s := range spans {
				assert.NotEqual(t, codes.Error, s.Status().Code, "%s: %s", s.Name(), s.Status().Description)
				assert.Empty(t, attr(s, "error.type"), s.Name())
			}
			for _, s := range spans {
				t.Logf("%s %s outcome=%q uncounted=%q status=%s", tr, s.Name(), attr(s, "retrace.outcome"), attr(s, "retrace.uncounted"), s.Status().Code)
			}
			counts, err := retracetest.TraceCounts(spans)
			require.NoError(t, err)
			assert.Zero(t, counts.Calls)
			assert.Equal(t, int64(3), rootInt(spans, "retrace.calls.uncounted"), "server/discover, initialize, notifications/initialized")
		})
	}
}

// logTree logs the trace's spans, each with its parent and the attributes
// by which it is counted, so that a count that disagrees can be read.
func logTree(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "%s <- %s %q %s", s.SpanContext().SpanID(), s.Parent().SpanID(), s.Name(), s.Status().Code)
		for _, kv := range s.Attributes() {
			if k := string(kv.Key); strings.HasPrefix(k, "retrace.") || k == "error.type" || k == "jsonrpc.request.id" {
				fmt.Fprintf(&b, " %s=%s", k, kv.Value.Emit())
			}
		}
		b.WriteByte('\n')
	}
	t.Log("the trace:\n" + b.String())
}
