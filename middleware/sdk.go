package middleware

import (
	"net/http"
	"strconv"
)

// sdkRetryCount is the header in which Stainless-built SDKs (openai-go,
// anthropic-sdk-go) number a request among their retries, from 0.
const sdkRetryCount = "X-Stainless-Retry-Count"

// initSDKFrame places an SDK middleware's request in the layers: it stands
// for the SDK's retry loop, named after the SDK, with the SDK's attempts,
// unless the layer above already declared them (WithInnerAttempts), and it
// returns the request's place among the SDK's retries (0 when the SDK does
// not say).
func (c *call[Req, Resp]) initSDKFrame(parent *frame, req Req) int {
	l := c.l
	resend := 0
	if r, ok := any(req).(*http.Request); ok && r != nil {
		if n, err := strconv.Atoi(r.Header.Get(sdkRetryCount)); err == nil && n > 0 {
			resend = n
		}
	}
	if parent != nil && parent.perAttempt {
		// The layer above counts the SDK's attempts: each request is one leaf.
		c.frame.init(parent, l.name, 1, false, &c.root)
		return resend
	}
	c.frame.init(parent, l.cfg.sdkName, l.cfg.sdkAttempts, l.cfg.sdkAttempts > 1, &c.root)
	return resend
}
