package retraceeino

import (
	"context"
	"errors"
	"weak"

	"github.com/cloudwego/eino/adk"

	"github.com/retrace-go/retrace/policies"
)

// governRetry makes eino's model retry stop where retrace's classification
// says another call cannot succeed, keeping the predicate the user set:
//
//   - with ShouldRetry set, a decision to retry an error is kept when the
//     error is Transient, or when the decision changes the call (new input
//     messages, more options) and the error is not Fatal, Programming or
//     Canceled, which no change of the call fixes; otherwise eino returns
//     the error as it is;
//   - else IsRetryAble (eino's default: every error) is narrowed to the
//     Transient errors, as its retries repeat the identical call.
//
// eino reads the config afresh on every model call, from the agent's own
// ModelRetryConfig, which BeforeModelRewriteState is handed before each one:
// the config is changed in place, once, under the middleware's lock, so
// that every run that reads it afterwards has passed the lock first. A
// config shared with an agent that this middleware does not govern is
// governed for it too, and read there unsynchronised: give each such agent
// its own.
func (h *Middleware) governRetry(rc *adk.ModelRetryConfig) {
	key := weak.Make(rc)
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.retries[key]; ok {
		return
	}
	h.pruneRetries()
	h.retries[key] = struct{}{}
	cl := h.cfg.Classifier
	if user := rc.ShouldRetry; user != nil {
		rc.ShouldRetry = func(ctx context.Context, rctx *adk.RetryContext) *adk.RetryDecision {
			d := user(ctx, rctx)
			if d == nil || !d.Retry || rctx == nil || rctx.Err == nil {
				return d // a rejected answer, or no retry: the user's decision
			}
			changed := d.ModifiedInputMessages != nil || d.AdditionalOptions != nil
			if mayRetry(cl.Classify(rctx.Err).Class, changed) {
				return d
			}
			return &adk.RetryDecision{} // the error, returned as it is
		}
		return
	}
	user := rc.IsRetryAble
	rc.IsRetryAble = func(ctx context.Context, err error) bool {
		if user != nil && !user(ctx, err) {
			return false
		}
		return mayRetry(cl.Classify(err).Class, false)
	}
}

// mayRetry reports whether another call may succeed after an error of class
// c: the identical call only after a Transient error; a changed one (new
// input, other options) also after a Permanent, ContextOverflow or Unknown
// one.
func mayRetry(c policies.Class, changed bool) bool {
	switch {
	case c.Retryable():
		return true
	case !changed:
		return false
	}
	switch c {
	case policies.Fatal, policies.Programming, policies.Canceled:
		return false
	}
	return true
}

// minPrune is the size of the governed configs' set below which it is
// not pruned.
const minPrune = 16

// pruneRetries forgets the governed configs that have been collected,
// when the set has doubled since it was last pruned, so that it stays
// within twice the configs alive. h.mu is held.
func (h *Middleware) pruneRetries() {
	if len(h.retries) < max(h.pruneAt, minPrune) {
		return
	}
	for k := range h.retries {
		if k.Value() == nil {
			delete(h.retries, k)
		}
	}
	h.pruneAt = 2 * len(h.retries)
}

// maxExhausted bounds how many of eino's retry errors, one inside another,
// runFailure looks through.
const maxExhausted = 8

// runFailure is the error a failed run's root is classified by: the run's
// error, or, when eino's model retry gave up, the last error it retried. An
// adk.RetryExhaustedError unwraps to eino's marker ErrExceedMaxRetries, not
// to that error, so that the root would otherwise classify eino's words
// while every span beneath it says what the provider answered.
func runFailure(err error) error {
	for range maxExhausted {
		var rex *adk.RetryExhaustedError
		if !errors.As(err, &rex) || rex.LastErr == nil {
			return err
		}
		err = rex.LastErr
	}
	return err
}
