package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"
)

// awaitLine reads r until a line starts with prefix, then drains it.
func awaitLine(r io.Reader, prefix string, within time.Duration) error {
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				found <- true
				for sc.Scan() {
				}
				return
			}
		}
		found <- false
	}()
	guard := time.NewTimer(within) // a guard: the line comes, or the process is stuck
	defer guard.Stop()
	select {
	case ok := <-found:
		if !ok {
			return errors.New("it exited before it listened")
		}
		return nil
	case <-guard.C:
		return errors.New("it did not say it listens in time")
	}
}

// freePort is a port on 127.0.0.1 no one listened on a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// nilLogger is the SDK's logs, kept out of the demo's output.
func nilLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
