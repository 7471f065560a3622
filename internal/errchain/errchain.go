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
//
// The first inlineLen errors live in the Chain itself, and a longer chain
// moves to the heap: a Chain is made on the stack for every failure
// classified, and the memory a stack Chain clears is then a few words, not
// MaxLen's.
type Chain struct {
	inline       [inlineLen]error
	more         []error // the whole chain, once it outgrows inline
	n            int
	hasIs, hasAs uint64 // bit i: error i has its own Is, or As, method
}

// inlineLen is how many errors a chain holds without an allocation: a
// provider's answer under a few wrappers, a layer's stop and its cause.
const inlineLen = 8

// MaxLen bounds how many errors of one chain are looked at.
const MaxLen = 64

// Add appends err and the errors it wraps to the chain.
func (c *Chain) Add(err error) {
	for err != nil && c.n < MaxLen {
		c.push(err)
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
func (c *Chain) All() []error {
	if c.more != nil {
		return c.more
	}
	return c.inline[:c.n]
}

// HasAs reports whether an error of the chain has its own As method: if
// none has, As of the chain is a type assertion on each error.
func (c *Chain) HasAs() bool { return c.hasAs != 0 }

// push appends one error, and notes which of the methods errors.Is and
// errors.As call it has.
func (c *Chain) push(err error) {
	if _, ok := err.(interface{ Is(error) bool }); ok {
		c.hasIs |= 1 << c.n
	}
	if _, ok := err.(interface{ As(any) bool }); ok {
		c.hasAs |= 1 << c.n
	}
	switch {
	case c.n < inlineLen:
		c.inline[c.n] = err
	case c.more == nil:
		c.more = append(append(make([]error, 0, MaxLen), c.inline[:]...), err)
	default:
		c.more = append(c.more, err)
	}
	c.n++
}

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

// Match reports which of targets are in the chain: bit k of the result is
// Is(targets[k]), for at most 64 targets. One pass over the chain answers
// them all, where a question per target walks it once each. The targets
// are comparable sentinels, as Is's is.
func (c *Chain) Match(targets []error) uint64 {
	var m uint64
	for i, e := range c.All() {
		own := c.hasIs&(1<<i) != 0
		for k, t := range targets[:min(len(targets), 64)] {
			if e == t || own && e.(interface{ Is(error) bool }).Is(t) {
				m |= 1 << k
			}
		}
	}
	return m
}
