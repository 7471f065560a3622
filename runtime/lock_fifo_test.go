//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package runtime_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// fsMkfifo makes a FIFO at path.
func fsMkfifo(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, syscall.Mkfifo(path, 0o600))
}

// fsUnblockFIFO opens the FIFO at path for writing, without waiting, and
// closes it: a reader blocked opening it returns, and reads nothing.
func fsUnblockFIFO(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		_ = f.Close()
	}
}
