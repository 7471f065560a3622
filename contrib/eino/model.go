package retraceeino

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
)

// modelRequest is one model call as the layers see it.
type modelRequest struct {
	m      model.BaseModel[*schema.Message]
	input  []*schema.Message
	opts   []model.Option
	stream bool
}

// modelResult is a model call's answer: the message, or a stream's chunks,
// and what the answer says of itself, for the inference span's end.
type modelResult struct {
	msg     *schema.Message
	chunks  []*schema.Message
	summary session.Message
}

// callModel is the model layer's handler: one call of the model eino wraps.
// A stream is read to its end inside the attempt, so that a stream that
// fails midway is a failed attempt the inference layer can retry, not text
// half delivered to the agent.
func (h *Middleware) callModel(ctx context.Context, req modelRequest) (modelResult, error) {
	var res modelResult
	if !req.stream {
		msg, err := req.m.Generate(ctx, req.input, req.opts...)
		if err != nil {
			return res, err
		}
		res.msg = msg
		res.summary = summarise([]*schema.Message{msg})
		return res, nil
	}
	clk := h.clock()
	start := clk.Now()
	sr, err := req.m.Stream(ctx, req.input, req.opts...)
	if err != nil {
		return res, err
	}
	defer sr.Close()
	var firstChunk time.Duration
	for {
		chunk, err := sr.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return modelResult{}, streamFailure(ctx, err)
		}
		if len(res.chunks) == 0 {
			firstChunk = clk.Now().Sub(start)
		}
		res.chunks = append(res.chunks, chunk)
	}
	res.summary = summarise(res.chunks)
	if res.summary.StopReason == "" {
		// A model says why its answer ended in the chunk that ends it. A
		// stream that ends without one ended early: eino-ext's OpenAI
		// stream reader ends as cleanly at a connection closed before
		// [DONE] as at [DONE] itself, so the clean end proves nothing, and
		// the short answer must be retried, not returned.
		return modelResult{}, policies.StreamDropped("",
			fmt.Errorf("%w: the model's stream ended without a finish reason", io.ErrUnexpectedEOF))
	}
	res.summary.FirstChunk = firstChunk
	return res, nil
}

// streamFailure is the error of a stream that failed after it began. What
// says what went wrong is kept: the provider's answer in the stream (an
// error event, decoded by the core by its shape), a failure retrace already
// classified (middleware.Transport's dropped stream (policies.StreamDropped) for a body
// without its terminator, a layer's failure, an explicit class), and the end of the attempt's context (its
// timeout, or the caller's). Anything else broke the stream (a reset
// connection): it is dropped, a dropped stream (policies.StreamDropped), as retrace's own
// provider says of it.
func streamFailure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if _, ok := policies.AsAnswer(err); ok {
		return err
	}
	if _, ok := errors.AsType[*policies.Error](err); ok {
		return err
	}
	return policies.StreamDropped("", err)
}

// requestIDKey is where eino-ext's OpenAI model keeps the completion's ID
// in a message's Extra.
const requestIDKey = "openai-request-id"

// summarise reads what a model's messages (one answer, or a stream's
// chunks in order) say of the answer: the last finish reason and the last
// non-empty usage (OpenAI sends the usage in the stream's last chunk), and
// the completion's ID when the model keeps it. eino's messages do not say
// which model answered, so Model is left empty.
func summarise(msgs []*schema.Message) session.Message {
	var s session.Message
	for _, m := range msgs {
		if m == nil {
			continue
		}
		if rm := m.ResponseMeta; rm != nil {
			if rm.FinishReason != "" {
				s.StopReason = rm.FinishReason
			}
			if u := rm.Usage; u != nil && (u.PromptTokens > 0 || u.CompletionTokens > 0) {
				s.Usage = session.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
			}
		}
		if id := stringValue(m.Extra[requestIDKey]); id != "" {
			s.ResponseID = id
		}
	}
	return s
}

// stringValue is v as a string when its kind is one (eino-ext keeps the ID
// as a named string type of its own), else "".
func stringValue(v any) string {
	if v == nil {
		return ""
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return rv.String()
	}
	return ""
}
