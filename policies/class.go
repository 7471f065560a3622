package policies

import (
	"time"
)

// Class says what retrying an error can achieve.
type Class string

const (
	Transient       Class = "transient"        // a later identical call may succeed
	Permanent       Class = "permanent"        // the identical call fails identically
	Fatal           Class = "fatal"            // stop the whole task (quota or billing exhausted)
	ContextOverflow Class = "context_overflow" // compact the context; never retry as is
	Programming     Class = "programming"      // a bug (unsupported, panic); never retry
	Canceled        Class = "canceled"         // the caller's context ended
	// Unknown is an error no rule recognises. Whether it is retried is the
	// retry policy's choice (RetryConfig.RetryUnknown): a runtime's exec loop
	// usually retries it, a session does not. A layer that stops on it ends
	// with outcome failed_unknown, never "permanently". It does not count
	// against a breaker.
	Unknown Class = "unknown"
	// UserAction is a call that needs the user to act first (open a URL to
	// authorize, consent): until they have, the identical call fails the
	// same way; once they have, it may succeed. No layer retries it, and it
	// does not count against a breaker: the downstream is not failing.
	UserAction Class = "user_action"
)

// Retryable reports whether a retry of the identical call may succeed.
func (c Class) Retryable() bool { return c == Transient }

// Classification is what the classifier found out about an error.
type Classification struct {
	Class      Class
	Type       string        // low-cardinality error.type: provider code, HTTP status or Go type
	Reason     string        // the rule that decided, e.g. "http 429", "marker: invalid api key"
	RetryAfter time.Duration // the server's hint, 0 if none

	answer *Error // the server's answer the rules read, if the error is one
}
