package retracemcp_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// serverBin is the fault server: this test binary (see faultsEnv).
var serverBin string

func TestMain(m *testing.M) {
	if os.Getenv(faultsEnv) != "" {
		if err := serveFaults(os.Args[1:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "fault server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var err error
	if serverBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
