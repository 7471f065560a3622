// Package soak holds retrace's chaos soak test, and nothing else: it has no
// API. TestChaosSoak sends thousands of logical calls through runtime.Exec, a
// session and the OpenAI provider (the real openai-go client, real HTTP and
// SSE) to the fault server, which answers a seeded 30% of the requests with a
// mix of faults: 503, 429 with Retry-After, a stream reset mid-stream, a stream
// that ends before [DONE], and rarely 401. The calls run on virtual clocks, so
// that backoffs cost nothing, and the test checks that every call ends with a
// known outcome, that nothing is lost, and that the provider requests the
// server counted equal the retrace.calls of the root spans, call by call.
//
//	go test -count=1 -v ./soak                 # 10,000 calls
//	go test -race -count=1 -v ./soak           # 1,000 calls
//	go test -count=1 -v ./soak -soak.seed=7    # another fault mix
//	go test -race -count=1 -v ./soak -soak.calls=10000  # as CI runs it
package soak
