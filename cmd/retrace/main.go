// Command retrace is retrace's command line.
//
//	retrace faultserver [flags]   a fault-injecting OpenAI- and Anthropic-compatible server on 127.0.0.1
//	retrace explain [flags]       one trace's tree, amplification and what to change
//	retrace version               the version of retrace this binary was built from
//
// Run it from a checkout with go run ./cmd/retrace, or install it with
// go install github.com/retrace-go/retrace/cmd/retrace@latest.
//
//	go run ./cmd/retrace faultserver -fault 429 -fail-first 3
//	go run ./cmd/retrace faultserver -tool-call 'search_docs={"query":"retry"}' -fault 503 -fail-first 2
//	go run ./cmd/retrace explain -jaeger http://localhost:16686 -trace 4bf92f3577b34da6a3ce929d0e0e4736
//	go run ./cmd/retrace explain -otlp-file traces.json -trace 4bf92f3577b34da6a3ce929d0e0e4736 -json
//	go run ./cmd/retrace explain -otlp-file traces.json -html traces.html   # one offline page, a waterfall per trace
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage: retrace <command> [flags]

commands:
  faultserver   run a fault-injecting OpenAI- and Anthropic-compatible server on 127.0.0.1
  explain       print one trace's tree, its amplification and what to change
  version       print the version of retrace this binary was built from

Run "retrace <command> -help" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command line without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "faultserver":
		err = faultserver(args[1:], stderr)
	case "explain":
		err = explain(context.Background(), args[1:], stdout, stderr)
	case "version":
		err = version(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "retrace: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "retrace:", err)
		return 1
	}
	return 0
}
