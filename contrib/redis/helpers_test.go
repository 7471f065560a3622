package redisstate_test

import (
	"errors"
	"net"
	"testing"
	"time"
)

// newSilentServer listens on 127.0.0.1 and accepts connections without ever
// answering: a Redis that hangs. It stops when the test ends.
func newSilentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// testStep bounds a store's step in the tests that are not about the
// timeout: generous, so that a loaded machine running the race detector
// decides nothing locally by accident.
const testStep = 10 * time.Second
