package middleware

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// role is what a layer is, beyond the policies it runs: where a call stands
// among the layers, how its spans are named, what may refuse an attempt,
// and how a call ends. The core (layer.go, call.go, attempt.go, steps.go,
// executor.go) runs every layer's policies the same way, names no
// transport, and asks its role at those points; a role is chosen when the
// layer is built, so a call never asks which layer it is in:
//
//   - named (this file): a layer of Layer, its span named after it
//     (WithSpanName), its attempts "{layer} attempt";
//   - request (request.go): Transport's, whose spans are the physical HTTP
//     requests and end with the answer's body;
//   - sdkRequest (sdk.go): SDK's, a request that also stands for the
//     SDK's retry loop in the nesting.
//
// What makes a layer a GenAI model call (genai.go) is not a role: any
// layer can be one.
type role[Req, Resp any] interface {
	// place sets the call's frame: which layer it is beneath (parent, nil
	// at the root) and how many leaf calls it may make.
	place(c *call[Req, Resp], parent *frame)
	// start starts the call's span, a child of c.fctx, with the attributes
	// a sampler must see.
	start(ctx context.Context, c *call[Req, Resp], parent *frame) (context.Context, trace.Span)
	// attempt starts the span of attempt n of the layer's retry.
	attempt(ctx context.Context, c *call[Req, Resp], n int) (context.Context, trace.Span)
	// refusal is why the next attempt of req must not be made, nil if
	// nothing of the role refuses it.
	refusal(req Req) error
	// end ends the call once the layer's verdict is in (its outcome,
	// attempts, classification and error): it reports the call's worst case
	// to the enclosing layer and ends its span now (c.finish), or hands the
	// span to what outlives the call (an answer's body still to be read).
	end(ctx context.Context, c *call[Req, Resp], v ending[Resp])
	// keep hands cancel, the end of an attempt's context, to resp when resp
	// is still being read from the attempt (an answer's body): true when it
	// took it, and cancel is called when the reading ends.
	keep(resp Resp, cancel context.CancelFunc) bool
}

// named is the role of a layer of Layer.
type named[Req, Resp any] struct {
	span        string // the layer span's name (WithSpanName), else the layer's
	attemptName string // "{layer} attempt"
	opts        []trace.SpanStartOption
}

func newNamed[Req, Resp any](layer string, cfg config) *named[Req, Resp] {
	n := &named[Req, Resp]{span: cfg.spanName, attemptName: layer + " attempt"}
	if n.span == "" {
		n.span = layer
	}
	// The layer span is born with the user's attributes; retrace's are set
	// once, when it ends.
	if len(cfg.attrs) > 0 {
		n.opts = []trace.SpanStartOption{trace.WithAttributes(cfg.attrs...)}
	}
	if cfg.kind != trace.SpanKindInternal {
		n.opts = append(n.opts, trace.WithSpanKind(cfg.kind))
	}
	return n
}

func (n *named[Req, Resp]) place(c *call[Req, Resp], parent *frame) { c.placeFrame(parent) }

func (n *named[Req, Resp]) start(ctx context.Context, c *call[Req, Resp], parent *frame) (context.Context, trace.Span) {
	return c.tracer.Start(&c.fctx, n.span, withCallAttrs(ctx, parent, n.opts)...)
}

func (n *named[Req, Resp]) attempt(ctx context.Context, c *call[Req, Resp], _ int) (context.Context, trace.Span) {
	return c.tracer.Start(ctx, n.attemptName)
}

func (n *named[Req, Resp]) refusal(Req) error { return nil }

func (n *named[Req, Resp]) end(ctx context.Context, c *call[Req, Resp], v ending[Resp]) {
	c.frame.reportWorst()
	c.finish(ctx, v)
	c.release()
}

func (n *named[Req, Resp]) keep(Resp, context.CancelFunc) bool { return false }
