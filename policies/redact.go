package policies

import (
	"github.com/retrace-go/retrace/internal/errchain"
	"github.com/retrace-go/retrace/internal/redact"
)

// Redact replaces API keys, bearer tokens and other credentials in s with
// [REDACTED]. retrace runs every message it puts on a span, in a diagnosis or
// in a result for the model through it.
//
// It recognises, ignoring case except in AIza:
//   - "Bearer" or "Basic", whitespace, and a token of 6 or more of
//     [A-Za-z0-9._~+/*=_-]: "Bearer [REDACTED]";
//   - a provider's key prefix and the key after it, of [A-Za-z0-9_*-]:
//     sk-ant, xai, gsk, ghp, gho, ghs, ghu, ghr, github_pat, xoxa, xoxb, xoxp
//     and xoxr followed by '-' or '_', and sk-, rk-, pk-, all kept
//     ("sk-[REDACTED]"), and AIza (a Google key), replaced whole. After a
//     word boundary 6 characters of key are enough (20 for AIza). Glued to a
//     word character, as in "invalid_key_sk-proj-…", the key needs 16 and a
//     run of 10 letters and digits with both in it: hyphenated words such as
//     "task-management-system" or "risk-assessment-v2" have the prefix but
//     only short runs;
//   - a secret's name, ':' or '=' with optional quotes and spaces, and a
//     value of 4 or more characters up to a space, quote, '&', ',', ';' or
//     '}', taking a URL's authority in it whole. The names are api_key, apikey, api-key, access_token, auth_token,
//     token, secret, password, authorization and x-api-key, also at the end
//     of a snake_case name, and key after '_' or '-'; those two need '=' or
//     a quoted name (OPENAI_API_KEY=, "secret_key":), so that an error code
//     and its message ("invalid_api_key: Incorrect API key") are kept. A
//     value "Bearer" or "Basic" before a space is a scheme, kept while the
//     bearer rule takes the token after it;
//   - a URL query or fragment parameter named sig or code, or whose name, or
//     last part after '_' or '-', is key, apikey, token, signature, secret,
//     password, passwd, pwd, authorization, auth, session, credential,
//     credentials or jwt (api_key, access_token, client_secret,
//     X-Amz-Signature, X-Amz-Credential, user_session): its value, the other
//     parameters kept;
//   - a Cookie or Set-Cookie header, ':' or '=' with optional quotes and
//     spaces, and the value of each of its name=value pairs up to a space,
//     '"', ',', ';' or '\' (a quoted value up to its closing quote):
//     "Cookie: session=[REDACTED]; theme=[REDACTED]"; of Set-Cookie only the
//     first pair, the cookie, its attributes (Path=/) kept;
//   - the word token, credential, credentials or bearer, whitespace, and a
//     token of 8 or more of [A-Za-z0-9._~+/*_-] with letters and digits
//     among them: "invalid bearer credential [REDACTED]", while "token limit
//     exceeded" and "bearer token missing" are kept. "Bearer" before one of
//     those words leaves the token to it;
//   - the password in a URL's userinfo ("https://user:[REDACTED]@host"), or
//     a user name without a password that is a token: 16 or more of
//     [A-Za-z0-9._~+*_-], letters and digits among them;
//   - any other opaque token: 32 or more of [A-Za-z0-9._~+/*_-], with any
//     '=' padding after it, that holds a run of 16 letters and digits with
//     both (a JWT, a hex or base64 key). A run that starts with '/' or after
//     '@' is a path or a host, judged part by part between slashes, so that a
//     URL keeps its host and path around an ID. Runs of short parts (file
//     paths, model names such as anthropic.claude-3-5-sonnet-20241022-v2,
//     UUIDs) are kept, and so are a provider's object IDs, a known prefix
//     then letters and digits only (req_…, chatcmpl-…, msg_…, call_…): they
//     grant nothing, and support asks for them. In the path of a URL (after
//     its authority) a part of [A-Za-z0-9_*-] between slashes needs no 32
//     characters, only the run of 16: a key or a webhook's token
//     (https://hooks.slack.com/services/T…/B…/[REDACTED]); a file's path
//     keeps such a part (/tmp/TestRunTask2874651/), as a tool's error
//     names it.
//
// A redacted token that is itself a secret's name ("Bearer api_key: …",
// "Bearer api_key=…"), a value ending in ':' ("password: OPENAI_API_KEY:
// …") or in a secret's name and '=' ("password=secret='…'"), a cookie
// header's name ("password: Cookie: sid=…") or a word that names a token
// ("secret: credential tok_…") takes what it names along.
//
// It scans s once, in time linear in len(s), returns s itself, without
// allocating, when there is nothing to redact, and Redact(Redact(s)) ==
// Redact(s).
//
// Known values (the credentials of the call, see [WithSecrets]) are
// redacted first, by exact value, wherever they appear: a pattern that took
// part of one would leave the rest, which its exact value no longer
// matches.
func Redact(s string, known ...string) string { return redact.Text(s, known, 0) }

// redactAPIErrors redacts the known values in the code and message of each
// *Error in err's chain, in place: retrace built them from a provider's
// answer, which may echo the key it was sent, and errors.As on the error a
// layer returns must not find it there. It looks at as many errors as
// AsAnswer does.
func redactAPIErrors(err error, known []string) {
	var c errchain.Chain
	c.Add(err)
	for _, e := range c.All() {
		if e, ok := e.(*Error); ok {
			e.Code, e.Message = redact.Known(e.Code, known), redact.Known(e.Message, known)
		}
	}
}
