package retracemcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrace-go/retrace/internal/errchain"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/policies"
)

// MetaKeyError is the params._meta key of a failed tool result under which
// a server says how its failure is classified, as [ToolError] writes it:
// {"class": "transient", "type": "rate_limit_error", "retry_after_ms": 5000}.
// A client reads it as the tool's own classification; without it, the
// result's text is classified by retrace's rules.
const MetaKeyError = "io.github.retrace-go/error"

// ToolFailure is a tools/call the tool answered with isError: true: its
// answer, and the text the model reads of it. Its error.type is tool_error,
// unless the server classified it ([MetaKeyError]).
type ToolFailure struct {
	Tool   string
	Text   string              // the result's text content
	Result *mcp.CallToolResult // the answer, as the server sent it
}

func (e *ToolFailure) Error() string { return e.Text }

// ErrorType is the conventions' error.type of a tool's failed answer.
func (e *ToolFailure) ErrorType() string { return errorTypeToolError }

// RPCError is a request the server answered with a JSON-RPC error, or a
// tool's failed result that words one ("MCP error -32602: Tool x not
// found", as the TypeScript SDK answers an unknown tool).
type RPCError struct {
	Method  string
	Code    int64
	Message string // the server's words
	// URLs are, for -32042 (URL elicitation required), the links the user
	// must open, each with what the server says of it, before the same
	// request can succeed.
	URLs []string
	Err  error // the SDK's error, or the tool's failure
}

func (e *RPCError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "JSON-RPC error " + strconv.FormatInt(e.Code, 10)
	}
	if len(e.URLs) > 0 {
		msg += " The user must open " + strings.Join(e.URLs, "; and ")
	}
	return msg
}

func (e *RPCError) Unwrap() error { return e.Err }

// ErrorType is the JSON-RPC error's code, as the conventions write it.
func (e *RPCError) ErrorType() string { return strconv.FormatInt(e.Code, 10) }

// ClosedError is a request whose session has ended, or ended it: the
// server's process exited (the pipe read its end), its connection closed,
// its HTTP session is gone, or it answered with what is not JSON-RPC, on
// which the SDK closes the session. The session serves no other request:
// without a restart ([Client.Start]) an ended session is Fatal for its
// tools, and a malformed answer, the server's bug, is Programming.
type ClosedError struct {
	Malformed bool  // the server's answer was not JSON-RPC
	Err       error // the SDK's error
}

func (e *ClosedError) Error() string {
	if e.Malformed {
		return "the MCP server answered with what is not JSON-RPC, and the session was closed: " + e.Err.Error()
	}
	return "the MCP session has ended (its server exited or closed the connection): " + e.Err.Error()
}

func (e *ClosedError) Unwrap() error { return e.Err }

// ErrorType is malformed_response for an answer that is not JSON-RPC,
// connection_closed for a session that ended.
func (e *ClosedError) ErrorType() string {
	if e.Malformed {
		return "malformed_response"
	}
	return "connection_closed"
}

// closed classifies a request that found, or left, its session ended: a
// restart may cure it when one was asked for, nothing else can.
func closed(err error, malformed, restartable bool) error {
	e := &ClosedError{Malformed: malformed, Err: err}
	class := policies.Fatal
	switch {
	case malformed:
		class = policies.Programming
	case restartable:
		class = policies.Transient
	}
	return &policies.Error{Class: class, Type: e.ErrorType(), Err: e}
}

// classify turns the SDK's answer to a request into what it means for
// retrace: nil for a success, else an error whose class the classifier
// finds (an explicit *policies.Error where the answer says it, an error
// with an error.type of its own where the rules read its text).
func classify(ctx context.Context, r *request, res mcp.Result, err error, n *note) error {
	if err == nil {
		if out, ok := res.(*mcp.CallToolResult); ok && out != nil && out.IsError {
			return failureOf(toolName(r.req), out)
		}
		return nil
	}
	return classifyErr(ctx, r.method, err, n, restartableFrom(ctx))
}

// classifyErr classifies an error the SDK returned for a request.
func classifyErr(ctx context.Context, method string, err error, n *note, restartable bool) error {
	if err == nil {
		return nil
	}
	if known(err) {
		return err
	}
	if ctx.Err() != nil {
		// The SDK returns ctx.Err(): the cause says whether the attempt's
		// timeout fired (Transient) or the caller gave up.
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			return &causedError{cause: cause, err: err}
		}
		return err
	}
	if ended := n.sessionEnded(); ended != nil && !handshake(method) {
		// The transport saw the session end beneath the request (over
		// Streamable HTTP: its connection broke, its answer's stream was
		// cut, its resumption or the session's standalone stream refused),
		// which the SDK words as a stream's trouble. A handshake's failure
		// is a server not (yet) there: its own error says so.
		return closed(fmt.Errorf("%w (%w)", err, ended), false, restartable)
	}
	if lost := n.undelivered(); lost != nil && !handshake(method) {
		// Nothing took the request: no one listens where the session's
		// server was, or its process's pipe is closed. A handshake that
		// finds no server is a server not (yet) there: its own error says so.
		return closed(err, false, restartable)
	}
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
		return closed(err, false, restartable)
	}
	if api := n.httpError(); api != nil && api.StatusCode == http.StatusRequestEntityTooLarge {
		// The request is more than the server takes, whatever its body
		// says: its arguments, not a model's context. Smaller arguments
		// may pass.
		return &policies.Error{Class: policies.Permanent, Type: TypeRequestTooLarge, Err: &httpError{api: api, err: err}}
	}
	if w := serverAnswer(err); w != nil {
		if sessionGone(w, n) {
			return closed(err, false, restartable)
		}
		return rpcError(method, w, err)
	}
	if n.malformedAnswer() {
		return closed(err, true, restartable)
	}
	if !errors.Is(err, errRejected) {
		// The connection's reader failed, which ends a session over a
		// pipe: the server's process closed its end (it exited), or wrote
		// what is not JSON.
		var syntax *json.SyntaxError
		switch {
		case errors.As(err, &syntax):
			return closed(err, true, restartable)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, fs.ErrClosed):
			// The pipe's end, or our end of it closed once the process
			// exited: which one the reader sees first is a race.
			return closed(err, false, restartable)
		}
	}
	if api := n.httpError(); api != nil {
		// An HTTP error status the SDK names only by its text: the status,
		// code and Retry-After as retrace reads a provider's.
		return &httpError{api: api, err: err}
	}
	return err
}

// TypeRequestTooLarge is the error.type of a request an MCP server refused
// as too large (HTTP 413): its arguments are more than the server takes.
const TypeRequestTooLarge = "request_too_large"

// sessionGone reports whether a JSON-RPC error answer says the session the
// request named is unknown to the server: 400 or 404 with a server error
// about the session, as a TypeScript server that keeps its sessions in a
// map answers once it has lost them (a restart), where the specification
// asks for 404, which the SDK reads itself.
func sessionGone(w *jsonrpc.Error, n *note) bool {
	api := n.httpError()
	if api == nil || api.StatusCode != http.StatusBadRequest && api.StatusCode != http.StatusNotFound || w.Code != codeServerError {
		return false
	}
	n.mu.Lock()
	session := n.session
	n.mu.Unlock()
	return session != "" && strings.Contains(strings.ToLower(w.Message), "session")
}

// codeServerError is JSON-RPC's generic server error.
const codeServerError = -32000

// handshake reports whether method is part of a session's set-up.
func handshake(method string) bool {
	switch method {
	case methodInitialize, methodDiscover, methodInitialized:
		return true
	}
	return false
}

// The methods of a session's set-up.
const (
	methodInitialize  = "initialize"
	methodDiscover    = "server/discover"
	methodInitialized = "notifications/initialized"
)

// known reports whether err is already one classify made.
func known(err error) bool {
	var (
		pe *policies.Error
		tf *ToolFailure
		re *RPCError
		ce *causedError
		he *httpError
		rd *redactedError
	)
	return errors.As(err, &pe) || errors.As(err, &tf) || errors.As(err, &re) || errors.As(err, &ce) || errors.As(err, &he) || errors.As(err, &rd)
}

// redactedError is an error whose text held a credential, written without
// it: the server's words may quote the Client's secrets, and the layers
// above the request, the tool's whose failure the model reads, may not know
// them. errors.Is and errors.As see through it.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr is err with its text redacted of secrets (and of the patterns
// retrace redacts everywhere), err itself when there is nothing to redact.
func redactErr(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	s := err.Error()
	if r := redact.Text(s, secrets, 0); r != s {
		return &redactedError{msg: r, err: err}
	}
	return err
}

// failureOf is a tool's isError answer as an error: the server's own
// classification when it gave one, else the text, for retrace's rules.
func failureOf(tool string, r *mcp.CallToolResult) error {
	f := &ToolFailure{Tool: tool, Text: Text(r), Result: r}
	if f.Text == "" {
		f.Text = "the tool failed without saying why"
	}
	if c, ok := metaClass(r.Meta); ok {
		return &policies.Error{Class: c.Class, Type: c.Type, RetryAfter: c.RetryAfter, Err: f}
	}
	if argumentsRefused(f.Text) {
		// The SDK checked the arguments against the tool's input schema
		// before the tool ran: the model can fix them and call again.
		return &policies.Error{Class: policies.Permanent, Type: "invalid_arguments", Err: f}
	}
	if code, msg, ok := wordedRPCError(f.Text); ok {
		// The TypeScript SDK answers the request's own errors (an unknown
		// tool) as a failed result in the words of its JSON-RPC error: they
		// mean what the error would.
		return rpcError(methodToolsCall, &jsonrpc.Error{Code: code, Message: msg}, f)
	}
	return f
}

// wordedRPCError reads a failed result's text that words a JSON-RPC error
// as the TypeScript SDK does: "MCP error -32602: Tool x not found".
func wordedRPCError(text string) (code int64, msg string, ok bool) {
	rest, found := strings.CutPrefix(text, "MCP error ")
	if !found {
		return 0, "", false
	}
	num, msg, found := strings.Cut(rest, ": ")
	if !found {
		return 0, "", false
	}
	code, err := strconv.ParseInt(num, 10, 64)
	if err != nil || code > -32000 || code < -32768 {
		return 0, "", false // not a code JSON-RPC reserves
	}
	return code, msg, true
}

// argumentsRefused reports whether a failed result's text is an SDK's
// refusal of the arguments against the tool's input schema, in the words
// of the Go SDK (`validating "arguments": …`) or the TypeScript SDK
// ("Invalid arguments for tool …"), the two that answer it with isError.
func argumentsRefused(text string) bool {
	return strings.HasPrefix(text, `validating "arguments"`) || strings.Contains(text, "Invalid arguments for tool")
}

// wireClass is MetaKeyError's value.
type wireClass struct {
	Class        string `json:"class"`
	Type         string `json:"type,omitempty"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
}

// metaClass reads a server's classification of its failure; a class
// retrace does not know, or a type that is not a short identifier, is not
// one.
func metaClass(meta mcp.Meta) (policies.Classification, bool) {
	v, ok := meta[MetaKeyError]
	if !ok {
		return policies.Classification{}, false
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return policies.Classification{}, false
	}
	var w wireClass
	if json.Unmarshal(raw, &w) != nil {
		return policies.Classification{}, false
	}
	class := policies.Class(w.Class)
	switch class {
	case policies.Transient, policies.Permanent, policies.Fatal, policies.ContextOverflow, policies.Programming, policies.Unknown,
		policies.UserAction:
	default:
		return policies.Classification{}, false
	}
	typ := errorTypeToolError
	if t := safeType(w.Type); t != "" {
		typ = t
	}
	after := time.Duration(min(max(w.RetryAfterMs, 0), int64(time.Hour/time.Millisecond))) * time.Millisecond
	return policies.Classification{Class: class, Type: typ, RetryAfter: after}, true
}

// safeType is a server's error type as error.type may carry it, else "":
// the core's one rule for a name that is not retrace's own, read through
// policies.Classify, which writes the name an error gives itself (its
// ErrorType method) only when it is a short identifier with nothing
// secret-shaped in it, and "_OTHER" in its place otherwise.
func safeType(t string) string {
	if t == "" || policies.Classify(namedType(t)).Type != t {
		return ""
	}
	return t
}

// namedType is an error that says nothing but the type it names.
type namedType string

func (namedType) Error() string       { return "" }
func (n namedType) ErrorType() string { return string(n) }

// errRejected matches the SDK's error for a request its transport could
// not deliver or whose answer it could not read, which leaves the session
// open (an HTTP request that failed).
var errRejected error = &jsonrpc.Error{Code: -32005}

// localCodes are the codes the SDK gives errors of its own making (a
// transport that refused the request, a connection closing), which are not
// the server's answer.
var localCodes = map[int64]bool{-32001: true, -32003: true, -32004: true, -32005: true}

// serverAnswer finds the JSON-RPC error the server answered with in err's
// tree, nil when there is none.
func serverAnswer(err error) *jsonrpc.Error {
	var c errchain.Chain
	c.Add(err)
	for _, e := range c.All() {
		if w, ok := e.(*jsonrpc.Error); ok && !localCodes[w.Code] {
			return w
		}
	}
	return nil
}

// rpcError classifies a JSON-RPC error answer by its code: the protocol's
// own codes say who erred; an implementation's code no rule knows is left
// to retrace's rules, which read its message.
func rpcError(method string, w *jsonrpc.Error, err error) error {
	e := &RPCError{Method: method, Code: w.Code, Message: w.Message, Err: err}
	var class policies.Class
	switch w.Code {
	case jsonrpc.CodeInvalidParams:
		// A tools/call's params are the tool's name and the model's
		// arguments: an unknown (or disabled) tool is a call that cannot
		// be made (Programming), other invalid params are arguments the
		// model can change (Permanent). Any other method's params are
		// retrace's.
		class = policies.Programming
		if method == methodToolsCall && !unknownTool(w.Message) {
			class = policies.Permanent
		}
	case mcp.CodeURLElicitationRequired:
		// The user must open a link (to authorize, to consent); then the
		// same request can succeed. Retrying before that fails the same
		// way; the model is told to ask the user, with the link.
		e.URLs = elicitationURLs(w.Data)
		return &policies.Error{Class: policies.UserAction, Type: e.ErrorType(), Err: e}
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound,
		mcp.CodeHeaderMismatch, mcp.CodeMissingRequiredClientCapabilities, mcp.CodeUnsupportedProtocolVersion:
		// The request was wrong: an unknown tool or method, params the
		// server cannot take. The same request fails the same way.
		class = policies.Programming
	case jsonrpc.CodeInternalError:
		// The server failed, as an HTTP 500 says: a later call may not.
		class = policies.Transient
	case mcp.CodeResourceNotFound:
		class = policies.Permanent
	default:
		return e
	}
	return &policies.Error{Class: class, Type: e.ErrorType(), Err: e}
}

// unknownTool reports whether an invalid-params error's words say the tool
// does not exist or is disabled, in the Go SDK's ("unknown tool \"x\"") or
// the TypeScript SDK's ("Tool x not found", "Tool x disabled") words.
func unknownTool(msg string) bool {
	m := strings.ToLower(msg)
	return strings.HasPrefix(m, "unknown tool") || strings.Contains(m, "not found") ||
		strings.HasPrefix(m, "tool ") && strings.HasSuffix(m, " disabled")
}

// elicitationURLs are the links of a -32042 error's URL elicitations, each
// with what the server says of it.
func elicitationURLs(data json.RawMessage) []string {
	var d struct {
		Elicitations []struct {
			URL     string `json:"url"`
			Message string `json:"message"`
		} `json:"elicitations"`
	}
	if len(data) == 0 || json.Unmarshal(data, &d) != nil {
		return nil
	}
	var out []string
	for _, e := range d.Elicitations {
		if e.URL == "" {
			continue
		}
		u := e.URL
		if e.Message != "" {
			u += " (" + e.Message + ")"
		}
		out = append(out, u)
	}
	return out
}

// causedError is an error the SDK returned because the attempt's context
// ended, with the cause that ended it first.
type causedError struct{ cause, err error }

func (e *causedError) Error() string   { return e.cause.Error() + ": " + e.err.Error() }
func (e *causedError) Unwrap() []error { return []error{e.cause, e.err} }

// httpError is a request the HTTP server refused with an error status.
type httpError struct {
	api *policies.Error
	err error
}

func (e *httpError) Error() string   { return e.err.Error() }
func (e *httpError) Unwrap() []error { return []error{e.api, e.err} }

// Text is a tool result as the model reads it: its structured content as
// JSON when it has one, else its text content, a block that is not text
// as its JSON.
func Text(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	if r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			return string(b)
		}
	}
	var parts []string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
			continue
		}
		if b, err := json.Marshal(c); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}
