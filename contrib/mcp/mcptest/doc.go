// Package mcptest is an MCP server whose tools fail on purpose, to test an
// MCP client under retrace (package retracemcp) against the failures a
// real server has, as net/http/httptest serves an HTTP client's tests. It
// is made with the official Go SDK and installs retracemcp's server
// middleware, so that its spans join the caller's trace.
//
// Its tools:
//
//	echo        answers with its text
//	search_docs fails as a rate-limited backend does: 429 rate_limit_error, classified by the server (retracemcp.ToolError), with a span of its own work beneath the request's
//	flaky       fails its first Config.FailFirst calls with 503 server_error, then answers
//	tool_error  answers isError with a plain text, no class
//	internal    answers a JSON-RPC internal error (-32603)
//	leak        fails quoting Config.Secret, as a server that quotes its credentials does
//	strict      answers invalid params (-32602) to an argument that is not a string
//	hang        never answers, until the request's context ends
//	crash       exits the server's process (os.Exit(3)); with Config.CrashOnce, only the first time
//	garbage     answers with a line that is not JSON-RPC
//
// A [Server] serves Streamable HTTP ([Server.Handler], with
// net/http/httptest in a test) or one session over a pair of streams, as a
// server over stdio does ([Server.Serve]). The crash tool ends the process
// it runs in: to call it, serve from a process of your own, such as your
// test binary run again as a child, its TestMain serving when the child's
// environment says so:
//
//	func TestMain(m *testing.M) {
//		if os.Getenv("FAULTS_SERVER") == "1" {
//			err := mcptest.NewServer(mcptest.Config{FailFirst: 2}).Serve(context.Background(), os.Stdin, os.Stdout)
//			if err != nil {
//				os.Exit(1)
//			}
//			os.Exit(0)
//		}
//		os.Exit(m.Run())
//	}
//
//	// in a test:
//	cmd := exec.Command(os.Args[0])
//	cmd.Env = append(os.Environ(), "FAULTS_SERVER=1")
//	cs, err := rc.Connect(ctx, client, &mcp.CommandTransport{Command: cmd}, nil)
//
// What the server received is told to Config.OnEvent as it happens: each
// request, with its method, tool and the trace context it carried, so that
// a test can check that the requests the server received are the leaf
// spans and retrace.calls of the caller's trace.
package mcptest
