// Package errchain reads an error's chain once: every error errors.Is and
// errors.As would visit, in their order. retrace's classifier, its
// redaction of a failure's answers and the MCP adapter's reading of a
// server's error all ask many questions of one chain; asked of the
// flattened chain they are type assertions on a few values, and the walk is
// written once.
package errchain

// Chain is an error's chain read once: every error errors.Is and errors.As
// would visit, in their order (depth first, an Unwrap() []error's errors in
// turn). Classifying a failure asks some twenty questions of its chain
// (which sentinel, which network or TLS type, which provider answer); asked
// of the chain each time, with errors.As's reflection and a target per
// question, they were most of what a failed attempt cost. Asked of the
// flattened chain they are type assertions on a few values.
//
// A chain holds at most MaxLen errors: a real one is a few wrappers deep,
// and a cyclic or enormous one must not hold a layer. A nil error in a
// chain ends its branch, as it does for errors.Is.
type Chain struct {
	errs         [MaxLen]error
	n            int
	hasIs, hasAs uint64 // bit i: errs[i] has its own Is, or As, method
}

// MaxLen bounds how many errors of one chain are looked at.
const MaxLen = 64

// Add appends err and the errors it wraps to the chain.
func (c *Chain) Add(err error) {
	for err != nil && c.n < MaxLen {
		c.errs[c.n] = err
		if _, ok := err.(interface{ Is(error) bool }); ok {
			c.hasIs |= 1 << c.n
		}
		if _, ok := err.(interface{ As(any) bool }); ok {
			c.hasAs |= 1 << c.n
		}
		c.n++
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				c.Add(e)
			}
			return
		default:
			return
		}
	}
}

// All returns the errors of the chain.
func (c *Chain) All() []error { return c.errs[:c.n] }

// Is reports whether target is in the chain, as errors.Is does: an error
// equal to it, or one whose Is method says so. target is a comparable
// sentinel, so the comparison cannot panic.
func (c *Chain) Is(target error) bool {
	for i, e := range c.All() {
		if e == target {
			return true
		}
		if c.hasIs&(1<<i) != 0 && e.(interface{ Is(error) bool }).Is(target) {
			return true
		}
	}
	return false
}

// IsAny reports whether any of targets is in the chain.
func (c *Chain) IsAny(targets ...error) bool {
	for _, t := range targets {
		if c.Is(t) {
			return true
		}
	}
	return false
}

// As returns the first error of the chain that is a T, as errors.As
// does: by type, or by its own As method.
func As[T any](c *Chain) (T, bool) {
	for i, e := range c.All() {
		if t, ok := e.(T); ok {
			return t, true
		}
		if c.hasAs&(1<<i) != 0 {
			var t T
			if e.(interface{ As(any) bool }).As(&t) {
				return t, true
			}
		}
	}
	var zero T
	return zero, false
}
