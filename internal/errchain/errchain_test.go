package errchain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// isEOF is an error whose own Is method claims io.EOF.
type isEOF struct{}

func (isEOF) Error() string        { return "custom" }
func (isEOF) Is(target error) bool { return target == io.EOF }

// asOp is an error whose own As method produces a *net.OpError.
type asOp struct{}

func (asOp) Error() string { return "as op" }
func (asOp) As(target any) bool {
	if p, ok := target.(**net.OpError); ok {
		*p = &net.OpError{Op: "dial"}
		return true
	}
	return false
}

// The chain answers as errors.Is and errors.As do, on wrapped, joined and
// self-describing errors.
func TestChainAnswersAsErrorsDoes(t *testing.T) {
	deep := error(syscall.ECONNRESET)
	for i := range 10 {
		deep = fmt.Errorf("layer %d: %w", i, deep)
	}
	errs := []error{
		errors.New("plain"),
		fmt.Errorf("wrapped: %w", io.EOF),
		errors.Join(errors.New("a"), fmt.Errorf("b: %w", context.Canceled)),
		fmt.Errorf("two: %w and %w", errors.New("x"), &net.DNSError{Err: "no such host"}),
		isEOF{},
		fmt.Errorf("w: %w", asOp{}),
		&net.OpError{Op: "read", Err: syscall.ECONNREFUSED},
		deep,
		errors.Join(nil, io.ErrUnexpectedEOF),
	}
	targets := []error{io.EOF, io.ErrUnexpectedEOF, context.Canceled, syscall.ECONNRESET, syscall.ECONNREFUSED, net.ErrClosed}
	for _, err := range errs {
		var c Chain
		c.Add(err)
		m := c.Match(targets)
		for k, target := range targets {
			assert.Equal(t, errors.Is(err, target), c.Is(target), "%q is %v", err, target)
			assert.Equal(t, errors.Is(err, target), m&(1<<k) != 0, "%q matches %v", err, target)
		}
		var op *net.OpError
		got, ok := As[*net.OpError](&c)
		assert.Equal(t, errors.As(err, &op), ok, "%q as *net.OpError", err)
		assert.Equal(t, op, got)
		var dns *net.DNSError
		gotDNS, ok := As[*net.DNSError](&c)
		assert.Equal(t, errors.As(err, &dns), ok, "%q as *net.DNSError", err)
		assert.Equal(t, dns, gotDNS)
	}
}

// A cyclic chain is read as far as maxChain errors, not forever.
type cycle struct{ next *cycle }

func (c *cycle) Error() string { return "cycle" }
func (c *cycle) Unwrap() error { return c.next }

func TestChainOfACycleEnds(t *testing.T) {
	a := &cycle{}
	a.next = a
	var c Chain
	c.Add(a)
	assert.Equal(t, MaxLen, c.n)
}
