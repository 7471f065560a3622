package retracetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds the request bodies the server reads.
const maxBody = 64 << 20

// Server is a fault-injecting chat-completions server. Its methods are safe
// for concurrent use.
type Server struct {
	mu      sync.Mutex
	script  Script
	scale   float64
	log     []Request
	written atomic.Int64 // body bytes the answers wrote
	srv     *http.Server
	ln      net.Listener
	closed  bool
	served  chan struct{}
	cancel  context.CancelFunc
	handles sync.WaitGroup // running handlers
	conns   sync.WaitGroup // open connections
}

// New returns a server, not yet started, that answers by script; a nil
// script always succeeds.
func New(script Script) *Server {
	if script == nil {
		script = Always(OK())
	}
	return &Server{script: script, scale: 1}
}

// Start listens on a free port of 127.0.0.1 and serves in the background.
func (s *Server) Start() error { return s.StartOn("127.0.0.1:0") }

// StartOn listens on addr and serves in the background. The host of addr
// must be 127.0.0.1, localhost or ::1: the server never listens on other
// interfaces.
func (s *Server) StartOn(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("retracetest: address %q: %w", addr, err)
	}
	if host != "127.0.0.1" && host != "localhost" && host != "::1" {
		return fmt.Errorf("retracetest: refusing to listen on %q: the host must be 127.0.0.1, localhost or ::1", addr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil || s.closed {
		return errors.New("retracetest: the server was already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("retracetest: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.ln, s.cancel, s.served = ln, cancel, make(chan struct{})
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState:         s.connState,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return nil
}

// connState tracks connections so that Close can wait for their goroutines.
// StateNew is reported by the Serve goroutine before the connection's
// goroutine starts, and every connection ends closed or hijacked.
func (s *Server) connState(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		s.conns.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.conns.Done()
	}
}

// URL returns the base URL of the API, such as http://127.0.0.1:PORT/v1, or
// "" before Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String() + "/v1"
}

// AnthropicURL returns the base URL of the Anthropic-compatible API, such as
// http://127.0.0.1:PORT (the Messages API is at /v1/messages beneath it), or
// "" before Start.
func (s *Server) AnthropicURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Close stops the server: it ends the context of every request in progress,
// so hanging and slow answers end, closes every connection, and returns when
// all of the server's goroutines have returned. Close may be called more
// than once, and before Start.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed || s.srv == nil {
		s.closed = true
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()

	s.cancel()
	_ = s.srv.Close()
	<-s.served
	s.handles.Wait()
	s.conns.Wait()
}

// SetScript replaces the script for the requests that arrive from now on.
func (s *Server) SetScript(script Script) {
	if script == nil {
		script = Always(OK())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = script
}

// SetTimeScale multiplies every fault's Delay by scale, so that 0.001
// turns a 10 s wait into 10 ms; a scale that is not positive means 1.
// Retry-After headers are not scaled.
func (s *Server) SetTimeScale(scale float64) {
	if scale <= 0 {
		scale = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scale = scale
}

// Requests returns how many chat-completion requests the server received
// since it started or was last Reset, counting each when it arrives, before
// its fault, and counting requests whose body was invalid.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// Received returns copies of the requests counted by Requests, in order of
// arrival.
func (s *Server) Received() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.log))
	for i, r := range s.log {
		out[i] = r.clone()
	}
	return out
}

// Written returns how many bytes of answer bodies the server wrote since it
// started or was last Reset: the bytes its handlers handed to the
// connections, which is what a client was sent, or could have read. A huge
// answer stops being written when the client hangs up, so Written shows how
// much of it a client read before it gave up (plus what the connection
// buffers held).
func (s *Server) Written() int64 { return s.written.Load() }

// Reset clears the count and the log of received requests and the count of
// bytes written; the next request is request 0 again.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
	s.written.Store(0)
}

// countingWriter counts the body bytes written through it. Unwrap lets
// http.ResponseController reach the connection's flusher and hijacker.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (w countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		panic(http.ErrAbortHandler)
	}
	s.handles.Add(1)
	s.mu.Unlock()
	defer s.handles.Done()
	w = countingWriter{ResponseWriter: w, n: &s.written}

	anthropic := anthropicPath(r.URL.Path)
	if r.Method != http.MethodPost || (!anthropic && r.URL.Path != "/chat/completions" && r.URL.Path != "/v1/chat/completions") {
		writeError(w, openAIDialect, wording{status: http.StatusNotFound, typ: "invalid_request_error",
			message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
		return
	}
	req := Request{Path: r.URL.Path, Header: maskedHeaders(r.Header)}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		req.Err = err
		req.Body = body
	} else if anthropic {
		req.decodeAnthropic(body)
	} else {
		req.decode(body)
	}

	s.mu.Lock()
	req.Index = len(s.log)
	s.log = append(s.log, req.clone())
	script, scale := s.script, s.scale
	s.mu.Unlock()

	w.Header().Set("X-Request-Id", fmt.Sprintf("req_%d", req.Index))
	if req.Err != nil && anthropic {
		writeError(w, anthropicDialect, wording{status: http.StatusBadRequest, typ: "invalid_request_error", message: req.Err.Error()})
		return
	}
	if req.Err != nil {
		writeError(w, openAIDialect, wording{status: http.StatusBadRequest, typ: "invalid_request_error", message: "We could not parse the JSON body of your request. " +
			"(HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"})
		return
	}
	f := script(req.Index, req.clone())
	if f.Delay > 0 {
		wait(r.Context(), time.Duration(float64(f.Delay)*scale))
	}
	if anthropic {
		respondAnthropic(w, r, req, f)
		return
	}
	respond(w, r, req, f)
}

// wait returns after d, or drops the request without an answer when its
// context ends first.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		panic(http.ErrAbortHandler)
	}
}
