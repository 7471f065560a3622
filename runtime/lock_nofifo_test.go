//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package runtime_test

import "testing"

// fsMkfifo skips the test: the syscall package cannot make a FIFO here.
func fsMkfifo(t *testing.T, _ string) {
	t.Helper()
	t.Skip("no FIFOs here")
}

// fsUnblockFIFO does nothing: no test made a FIFO to block on.
func fsUnblockFIFO(string) {}
