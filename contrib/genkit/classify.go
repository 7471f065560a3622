package retracegenkit

import (
	"errors"
	"net/http"

	"github.com/openai/openai-go"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// Classifier is the default classifier with a rule for the errors genkit's
// OpenAI-compatible plugins return: genkit wraps openai-go's *openai.Error
// in a status error whose text says little ("UNAVAILABLE: …"), so the rule
// reads the provider's own answer instead (status, code, message and
// Retry-After), and classifies it as retrace classifies any provider's.
// [New] sets it on every layer; a classifier in Config.Options wins.
func Classifier() *policies.Classifier { return policies.NewClassifier(OpenAIRule) }

// OpenAIRule classifies an openai-go (v1) *openai.Error anywhere in err's
// chain as the provider's answer, a *policies.APIError.
func OpenAIRule(err error) (policies.Classification, bool) {
	var oe *openai.Error
	if !errors.As(err, &oe) || oe == nil || oe.StatusCode == 0 {
		return policies.Classification{}, false
	}
	resp := &http.Response{StatusCode: oe.StatusCode, Header: http.Header{}}
	if oe.Response != nil {
		resp.Header = oe.Response.Header
	}
	api := middleware.APIErrorFrom(resp) // status and Retry-After; the SDK has read the body
	api.Message = oe.Message
	api.Code = oe.Code
	if api.Code == "" {
		api.Code = oe.Type
	}
	return policies.Classify(api), true
}
