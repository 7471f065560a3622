package middleware

import "context"

// Handler handles one request.
type Handler[Req, Resp any] func(ctx context.Context, req Req) (Resp, error)

// Middleware wraps a Handler in another.
type Middleware[Req, Resp any] func(Handler[Req, Resp]) Handler[Req, Resp]

// Chain composes middlewares into one; the first is the outermost. Nil
// middlewares are skipped.
func Chain[Req, Resp any](mws ...Middleware[Req, Resp]) Middleware[Req, Resp] {
	return func(next Handler[Req, Resp]) Handler[Req, Resp] {
		for i := len(mws) - 1; i >= 0; i-- {
			if mws[i] != nil {
				next = mws[i](next)
			}
		}
		return next
	}
}
