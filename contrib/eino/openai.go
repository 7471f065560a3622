package retraceeino

import (
	"errors"
	"fmt"

	goopenai "github.com/meguminnnnnnnnn/go-openai"

	"github.com/retrace-go/retrace/policies"
)

// OpenAIRule classifies the errors of eino-ext's OpenAI model
// (github.com/cloudwego/eino-ext/components/model/openai): its client's
// APIError and RequestError carry the HTTP status and the provider's code,
// which the default rules read from a policies.APIError. The client does not
// keep the response headers, so a Retry-After is not known here.
func OpenAIRule(err error) (policies.Classification, bool) {
	var api *goopenai.APIError
	if errors.As(err, &api) && api.HTTPStatusCode > 0 {
		code := ""
		if api.Code != nil {
			code = fmt.Sprint(api.Code)
		}
		if code == "" {
			code = api.Type
		}
		return policies.Classify(&policies.APIError{StatusCode: api.HTTPStatusCode, Code: code, Message: api.Message}), true
	}
	var req *goopenai.RequestError
	if errors.As(err, &req) && req.HTTPStatusCode > 0 {
		return policies.Classify(&policies.APIError{StatusCode: req.HTTPStatusCode, Message: string(req.Body)}), true
	}
	return policies.Classification{}, false
}
