package policies

// chain is an error's chain read once: every error errors.Is and errors.As
// would visit, in their order (depth first, an Unwrap() []error's errors in
// turn). Classifying a failure asks some twenty questions of its chain
// (which sentinel, which network or TLS type, which provider answer); asked
// of the chain each time, with errors.As's reflection and a target per
// question, they were most of what a failed attempt cost. Asked of the
// flattened chain they are type assertions on a few values.
//
// A chain holds at most maxChain errors: a real one is a few wrappers deep,
// and a cyclic or enormous one must not hold a layer. A nil error in a
// chain ends its branch, as it does for errors.Is.
type chain struct {
	errs         [maxChain]error
	n            int
	hasIs, hasAs uint64 // bit i: errs[i] has its own Is, or As, method
}

// maxChain bounds how many errors of one chain are looked at.
const maxChain = 64

// add appends err and the errors it wraps to the chain.
func (c *chain) add(err error) {
	for err != nil && c.n < maxChain {
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
				c.add(e)
			}
			return
		default:
			return
		}
	}
}

// all returns the errors of the chain.
func (c *chain) all() []error { return c.errs[:c.n] }

// is reports whether target is in the chain, as errors.Is does: an error
// equal to it, or one whose Is method says so. target is a comparable
// sentinel, so the comparison cannot panic.
func (c *chain) is(target error) bool {
	for i, e := range c.all() {
		if e == target {
			return true
		}
		if c.hasIs&(1<<i) != 0 && e.(interface{ Is(error) bool }).Is(target) {
			return true
		}
	}
	return false
}

// isAny reports whether any of targets is in the chain.
func (c *chain) isAny(targets ...error) bool {
	for _, t := range targets {
		if c.is(t) {
			return true
		}
	}
	return false
}

// chainAs returns the first error of the chain that is a T, as errors.As
// does: by type, or by its own As method.
func chainAs[T any](c *chain) (T, bool) {
	for i, e := range c.all() {
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
