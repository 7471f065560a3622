package redact

import (
	"strings"
	"testing"
)

// Alphabets the secret shapes draw their bodies from: what each rule takes
// as part of the secret, without '[' and ']' (so that a body cannot be part
// of a [REDACTED]) and without whitespace (so that it cannot span the
// spaces around it).
const (
	alnumChars    = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	tokenChars    = alnumChars + "._~+/*-_"
	keyChars      = alnumChars + "_*-"
	valueChars    = tokenChars + "=:@!?#%$()<>{|^`\\"         // no space, quote, '&', ',', ';' or '}'
	queryChars    = tokenChars + "=:@!?%$(){|^`\\"            // no space, quote, '&', '#', '<', '>', ',', ';' or '}'
	pwChars       = alnumChars + "._~+*-_=:@!%$(),;&{}|^"     // no space, quote, '/', '?', '#', '<', '>', '\\' or '`'
	userChars     = alnumChars + "._~+*-_"                    // token characters but '/', which ends an authority
	cookieChars   = alnumChars + "!#$%&'()*+-./:<=>?@^_`{|}~" // a cookie's octets: no space, '"', ',', ';' or '\\'
	randomLetters = "Zq4Rt8Lm2Wx"                             // letters and digits in a row, with both
	opaqueHead    = "a1B2c3D4e5F6g7H8"                        // 16 of them
)

// secretShape is a secret as it appears in text and the part that must not
// survive Text.
type secretShape struct{ text, body string }

// draw maps raw onto the alphabet and pads it to at least n characters.
func draw(raw []byte, alphabet string, n int) string {
	var b strings.Builder
	for _, c := range raw {
		b.WriteByte(alphabet[int(c)%len(alphabet)])
	}
	for b.Len() < n {
		b.WriteByte('x')
	}
	return b.String()
}

// pick chooses one of the options by n.
func pick(n uint8, options ...string) string { return options[int(n)%len(options)] }

// makeSecret builds one of the shapes Text must recognise from fuzz bytes.
// Every body holds a digit: the text around it (" ", "Bearer ", the URLs)
// holds none, so a body found in the output is the secret's, unless the
// fuzzed text around it holds it too.
func makeSecret(shape uint8, raw []byte) secretShape {
	v := shape / shapes
	switch shape % shapes {
	case 0: // a scheme and its token
		body := "Q7" + draw(raw, tokenChars+"=", 4)
		return secretShape{pick(v, "Bearer", "bearer", "Basic", "BASIC") + " " + body, body}
	case 1: // a provider's key after a word boundary
		prefix := pick(v, "sk-", "SK-", "rk-", "pk-", "sk-ant-", "xai-", "gsk_", "ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "AIza")
		if prefix == "AIza" {
			body := "9" + draw(raw, alnumChars+"_-", 19)
			return secretShape{prefix + body, body}
		}
		body := "7" + draw(raw, keyChars, 5)
		return secretShape{prefix + body, body}
	case 2: // a provider's key glued to a word
		prefix := pick(v, "sk-", "rk-", "pk-", "sk-ant-", "ghp_", "xai-", "AIza")
		body := draw(raw, keyChars, 0) + randomLetters
		if prefix == "AIza" {
			body = draw(raw, alnumChars+"_-", 0) + randomLetters
		}
		if len(body) < 20 {
			body = "A1b2c3d4e5"[:20-len(body)] + body
		}
		return secretShape{pick(v/7, "invalid_key_", "0", "key") + prefix + body, body}
	case 3: // a secret's name and its value
		name := pick(v, "api_key", "apikey", "API-KEY", "access_token", "auth-token", "token", "secret", "password",
			"authorization", "x-api-key", "OPENAI_API_KEY", "client_secret", "secret_key")
		sep := pick(v/4, "=", ": ", `": "`, "='", " = ", ":")
		if strings.Contains(name, "_") && name != "api_key" && name != "access_token" && sep[0] != '=' && sep[0] != '"' {
			sep = "=" // the end of a longer name needs '=' or quotes
		}
		body := "v4" + draw(raw, valueChars, 2)
		return secretShape{name + sep + body, body}
	case 4: // an opaque token, not ending in a full stop, which Text keeps
		body := opaqueHead + draw(raw, tokenChars, 15) + "Z"
		return secretShape{body, body}
	case 5: // a query parameter
		name := pick(v, "key", "api_key", "access_token", "token", "sig", "signature", "code", "client_secret", "password", "X-Amz-Signature",
			"auth", "pwd", "session", "credential", "X-Amz-Credential", "jwt")
		body := "v4" + draw(raw, queryChars, 0)
		return secretShape{"https://example.com/api/x?" + pick(v/16, "", "q=go&") + name + "=" + body, body}
	case 6: // a password in a URL
		body := "p4" + draw(raw, pwChars, 6)
		return secretShape{"https://" + pick(v, "user", "x-access-token", "", "oauth") + ":" + body + "@example.com/path", body}
	case 7: // a token as a URL's user name
		body := "u5" + draw(raw, userChars, 14) + "q"
		return secretShape{"https://" + body + "@example.com/", body}
	case 8: // a cookie header's value
		body := "c6" + draw(raw, cookieChars, 0)
		header := pick(v, "Cookie: session=", "cookie:sid=", `"Cookie": "a=1; token=`, "Set-Cookie: id=", "Cookie: theme=dark; s=")
		return secretShape{header + body + pick(v/5, "", "; theme=dark", "; Path=/; HttpOnly", `"`), body}
	case 9: // a token after the word that names it, not ending in a full stop
		body := "t9" + draw(raw, tokenChars, 5) + "Z"
		return secretShape{pick(v, "token", "Token", "credential", "CREDENTIALS", "bearer credential", "Bearer token", "BEARER") + pick(v/7, " ", "\n\t", "  ") + body, body}
	default: // a token in a URL's path: a part of key characters with a run of 16
		body := opaqueHead + draw(raw, keyChars, 0)
		path := pick(v, "https://api.example.com/v1/keys/", "https://hooks.slack.com/services/T0AB12CD/B0EF34GH/",
			"https://discord.com/api/webhooks/1122334455/", "http://u:p@h:8080/a/b/")
		return secretShape{path + body + pick(v/4, "", "/chat", "?x=1", "#top"), body}
	}
}

// shapes is the number of shapes makeSecret builds.
const shapes = 11

func FuzzRedact(f *testing.F) {
	for _, in := range []struct {
		before, after string
		shape         uint8
		raw           string
	}{
		{"Incorrect API key provided:", ". You can find your API key at https://platform.openai.com/account/api-keys.", 1, "proj-AbCdEf1234567890"},
		{"Authorization:", "", 0, "eyJhbGciOiJIUzI1NiJ9.payload.sig"},
		{`{"error": "`, `"}`, 2, "proj-abcdef123456"},
		{"config", "loaded", 3, "hunter22"},
		{"subscription key", ".", 4, "0123456789abcdef0123456789abcdef"},
		{"GET", "returned 403", 5, "abc%2Fdef"},
		{"dial", "failed: connection refused", 6, "pa55word"},
		{"clone", "denied", 7, "ghp16C7e42F292c6912E7710c838347A"},
		{"Bearer", "token: x", 8, "tok"},
		{"x-api-key:", "&", 11, "abc"},
		{"https://a:", "@b", 14, "x"},
		{"?key=", "#", 21, "y"},
		{"tokens used: 1234", "rate limit", 12, "secret"},
		{"https://u@hostx-api-key:@host/p", "", 3, "abcd"},
		{"password: OPENAI_API_KEY:", "", 0, "abcdefgh"},
		{"", "", 255, ""},
	} {
		f.Add(in.before, in.after, in.shape, []byte(in.raw))
	}
	f.Fuzz(func(t *testing.T, before, after string, shape uint8, raw []byte) {
		secret := makeSecret(shape, raw)
		in := before + " " + secret.text + " " + after
		out := Text(in, nil, 0)
		// Neither the body nor its end, which a rule that stopped early
		// would leave, is in the output, unless the text around has it.
		for _, part := range []string{secret.body, secret.body[max(0, len(secret.body)-8):]} {
			if !strings.Contains(before, part) && !strings.Contains(after, part) && strings.Contains(out, part) {
				t.Fatalf("Text(%q) = %q keeps %q of %q", in, out, part, secret.body)
			}
		}
		if IsSecret(in, nil) != (out != in) {
			t.Fatalf("IsSecret(%q) disagrees with Text = %q", in, out)
		}
		if again := Text(out, nil, 0); again != out {
			t.Fatalf("Text is not idempotent on %q:\n once: %q\ntwice: %q", in, out, again)
		}
		if once := Text(before, nil, 0); Text(once, nil, 0) != once {
			t.Fatalf("Text is not idempotent on %q:\n once: %q\ntwice: %q", before, once, Text(once, nil, 0))
		}

		// A known value goes wherever it is, glued or not.
		known := string(raw)
		if len(known) >= 8 && !strings.ContainsAny(known, "[]") && !strings.Contains(Redacted, known) {
			in := before + known + after
			if out := Text(in, []string{known}, 0); strings.Contains(out, known) {
				t.Fatalf("redact(%q) with %q known = %q", in, known, out)
			}
		}
		// IsSecret and HasKnown answer what Text and Known would do, whatever
		// the known value holds.
		for _, in := range []string{in, before, after} {
			k := []string{known}
			if out := Text(in, k, 0); IsSecret(in, k) != (out != in) {
				t.Fatalf("IsSecret(%q, %q) disagrees with Text = %q", in, known, out)
			}
			if out := Known(in, k); HasKnown(in, k) != (out != in) {
				t.Fatalf("HasKnown(%q, %q) disagrees with Known = %q", in, known, out)
			}
		}
	})
}
