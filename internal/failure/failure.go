// Package failure holds what retrace's packages do with a *policies.Error
// that users never need to: find the failure beneath the layers' stops, and
// make the error of a recovered panic. It reads only the error's exported
// fields, so the rules stay with the type and this package only applies them.
package failure

import (
	"errors"
	"fmt"

	"github.com/retrace-go/retrace/policies"
)

// Underlying is the error beneath retrace's layers in err: the last
// attempt's error of the innermost layer that failed, or err itself when no
// layer's failure is in it. It is what a span status, a turn's error text
// and a diagnosis name: the provider's or the tool's own failure, not the
// layers' narration around it.
func Underlying(err error) error {
	for {
		fe, ok := errors.AsType[*policies.Error](err)
		if !ok || fe.Outcome == "" || fe.Err == nil {
			return err
		}
		err = fe.Err
	}
}

// Recovered is a recovered panic: a Programming error, never retried, with
// the panic's value (its Err when the value is an error) and stack.
func Recovered(v any, stack []byte) *policies.Error {
	e := &policies.Error{Class: policies.Programming, Type: "panic", Reason: "panic", Message: fmt.Sprintf("panic: %v", v), Stack: stack}
	if err, ok := v.(error); ok {
		e.Err = err
	}
	return e
}
