package retraceeino

import (
	"github.com/retrace-go/retrace/policies"
)

// OpenAIRule classifies the errors of eino-ext's OpenAI model
// (github.com/cloudwego/eino-ext/components/model/openai) as a
// policies.Rule: an error whose chain holds a provider's answer (its
// client's APIError or RequestError) is classified as policies.Classify
// classifies it, and any other is left to the rules after it.
//
// Deprecated: the default classification decodes those errors by their
// shape ([policies.AsAPIError]), the same answer the same way whoever made
// the call, so no rule is needed; Config.Classifier nil is the defaults.
func OpenAIRule(err error) (policies.Classification, bool) {
	if _, ok := policies.AsAPIError(err); !ok {
		return policies.Classification{}, false
	}
	return policies.Classify(err), true
}
