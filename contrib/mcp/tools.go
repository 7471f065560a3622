package retracemcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/tool"
)

// Server is an MCP server as an agent's tools see it: the session its tool
// calls go to, and what happens when that session ends. Its methods are
// safe for concurrent use.
type Server struct {
	c     *Client
	start func(context.Context) (*mcp.ClientSession, error) // nil: never restarted
	owned bool                                              // Close closes the session

	mu       sync.Mutex
	cs       *mcp.ClientSession
	ended    error // why cs ended, nil while it serves
	restarts int
}

// Attach returns the server at the other end of cs, whose tools call cs.
// When cs ends (the server's process exits, its connection closes), every
// later call fails at once, Fatal, with a *ClosedError, and the model is
// told not to call the tool again: cs is not restarted. The caller keeps
// cs, and closes it.
func (c *Client) Attach(cs *mcp.ClientSession) *Server {
	return &Server{c: c, cs: cs}
}

// Start starts a session with start and returns its server, which starts
// another with start when the one it has ends: a call that finds the
// session ended is Transient (connection_closed), so the tool's retry calls
// again, on the new session, after its backoff; the breaker counts each
// such failure. start is called with the context of the call that needs
// the session, without its cancellation: make it connect through a client
// with [Client.Middleware], and bound its own wait. Close closes the
// current session.
func (c *Client) Start(ctx context.Context, start func(context.Context) (*mcp.ClientSession, error)) (*Server, error) {
	cs, err := start(ctx)
	if err != nil {
		return nil, err
	}
	return &Server{c: c, start: start, owned: true, cs: cs}, nil
}

// Session is the session the server's calls go to now.
func (s *Server) Session() *mcp.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cs
}

// Restarts is how many times the server's session was started again.
func (s *Server) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Close closes the session of a server made by [Client.Start]; for one made
// by [Client.Attach] it does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.owned || s.cs == nil {
		return nil
	}
	err := s.cs.Close()
	s.cs = nil
	return err
}

// session is the session to call: the current one, or, when it ended and
// the server restarts, a new one.
func (s *Server) session(ctx context.Context) (*mcp.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.cs == nil:
		return nil, middleware.Unsent(closed(fmt.Errorf("%w: the server was closed", mcp.ErrConnectionClosed), false, false))
	case s.ended == nil:
		return s.cs, nil
	case s.start == nil:
		// Nothing is sent: the session cannot carry it, and the call is
		// no request of the server's.
		return nil, middleware.Unsent(closed(s.ended, false, false))
	}
	_ = s.cs.Close() // what is left of it: its process, its goroutines
	cs, err := s.start(context.WithoutCancel(ctx))
	if err != nil {
		// The next call tries again.
		return nil, fmt.Errorf("restarting the MCP server: %w", err)
	}
	s.cs, s.ended = cs, nil
	s.restarts++
	return cs, nil
}

// ended records that cs ended with err, unless it has been replaced.
func (s *Server) end(cs *mcp.ClientSession, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs == cs && s.ended == nil {
		s.ended = err
	}
}

// call makes one tools/call on the server's session: the attempt of a
// governed tool, or a [Definition]'s call.
func (s *Server) call(ctx context.Context, name string, args map[string]any) (string, error) {
	cs, err := s.session(ctx)
	if err != nil {
		return "", err
	}
	if s.start != nil {
		ctx = context.WithValue(ctx, restartKey{}, true)
	}
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err == nil && res != nil && res.IsError {
		err = failureOf(name, res)
	}
	if err != nil {
		// The middleware classified the request's failure already; a
		// session without it is classified here, alike.
		err = redactErr(classifyErr(ctx, "tools/call", err, nil, s.start != nil), s.c.cfg.Secrets)
		if ce, ended := errors.AsType[*ClosedError](err); ended {
			s.end(cs, ce.Err)
		}
		return "", err
	}
	return Text(res), nil
}

// Tools lists the server's tools as governed tools, for a tool.Box and
// runtime.Loop, beside Go tools: each takes its name, description and
// input schema from the server, is governed by the Client's Config (a
// breaker per server and tool, shared with every other call of that tool
// through the Client), and makes each attempt one tools/call on the
// server's session. The model reads a tool's result as text (its
// structured content as JSON), and a failure as it reads a Go tool's.
func (s *Server) Tools(ctx context.Context) ([]*tool.Tool, error) {
	specs, server, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*tool.Tool, 0, len(specs))
	for _, spec := range specs {
		name := spec.Name
		out = append(out, tool.New(name, func(ctx context.Context, args map[string]any) (string, error) {
			return s.call(ctx, name, args)
		}, s.c.toolConfig(server, name, spec)))
	}
	return out, nil
}

// Definition is one of a server's tools, as an agent framework defines a
// tool: its name, description and input schema, and a call that sends one
// tools/call, for the framework's own tool governance (the eino and genkit
// adapters govern every tool call they run). Call returns the result's text
// or the classified failure (a *ToolFailure for an isError answer).
type Definition struct {
	Name        string
	Description string
	Parameters  map[string]any // the input schema, a JSON schema object
	Call        func(ctx context.Context, args string) (string, error)
}

// Definitions lists the server's tools as [Definition]s.
func (s *Server) Definitions(ctx context.Context) ([]Definition, error) {
	specs, _, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Definition, 0, len(specs))
	for _, spec := range specs {
		name := spec.Name
		out = append(out, Definition{Name: name, Description: spec.Description, Parameters: schemaMap(spec.InputSchema),
			Call: func(ctx context.Context, raw string) (string, error) {
				var args map[string]any
				if err := decodeArgs(raw, &args); err != nil {
					return "", &policies.Error{Class: policies.Permanent, Type: "invalid_arguments",
						Err: fmt.Errorf("%s: the arguments are not valid: %w", name, err)}
				}
				return s.call(ctx, name, args)
			}})
	}
	return out, nil
}

// list lists the server's tools, every page, and its name.
func (s *Server) list(ctx context.Context) ([]*mcp.Tool, string, error) {
	cs, err := s.session(ctx)
	if err != nil {
		return nil, "", err
	}
	var specs []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, "", fmt.Errorf("listing the MCP server's tools: %w", err)
		}
		specs = append(specs, t)
	}
	return specs, serverName(cs), nil
}

// decodeArgs decodes a model's arguments, "" as none.
func decodeArgs(raw string, v any) error {
	if raw == "" {
		raw = "{}"
	}
	return json.Unmarshal([]byte(raw), v)
}
