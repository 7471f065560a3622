package retracegenkit

import "github.com/retrace-go/retrace/policies"

// Classifier returns the default classifier.
//
// Deprecated: the default rules (policies.Classify) decode openai-go's
// *openai.Error wherever it is in an error's chain, as in the status error
// genkit's OpenAI-compatible plugins wrap it in, and every layer applies
// them without a classifier; [New] no longer installs one.
func Classifier() *policies.Classifier { return policies.NewClassifier() }

// OpenAIRule classifies an error that carries a provider's answer (an
// openai-go *openai.Error, or any answer policies.AsAPIError decodes) as the
// default rules classify it, and reports false for the rest.
//
// Deprecated: the default rules classify these errors; no rule is needed.
func OpenAIRule(err error) (policies.Classification, bool) {
	if _, ok := policies.AsAPIError(err); !ok {
		return policies.Classification{}, false
	}
	return policies.Classify(err), true
}
