package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/errchain"
)

// This file is the one decoder of provider answers. Whoever made the call
// (retrace's providers, a user's own openai-go or anthropic-sdk-go client,
// eino-ext's go-openai copy, a genkit plugin), the same HTTP answer becomes
// the same *Error, and so the same Classification. The core imports no
// SDK: it recognises their errors by their shape (see apiShape), which every
// version of those SDKs has kept.

// maxAPIMessage is the longest provider message an *Error keeps.
const maxAPIMessage = engine.CapAPIMessage

// maxErrorBody is how much of an error answer's body is read: enough to
// find the code that follows a long message (OpenAI writes the message
// first), bounded so that an answer of any size costs no more.
const maxErrorBody = 1 << 20

// ErrorFrom reads an error answer: its status, Retry-After, and an
// OpenAI- or Anthropic-style body ({"error": {"type", "code", "message"}},
// or {"error": "message"}). It reads at most 1 MiB of the body and puts
// what it read back, so the response can still be read in full. The code
// and type are found wherever they are in what it read, after a message of
// any length, and in a body cut short; the message is cut to at most 1 KiB,
// at a character boundary, the cut marked with "…".
func ErrorFrom(resp *http.Response) *Error {
	e := &Error{StatusCode: resp.StatusCode, RetryAfter: engine.ParseRetryAfter(resp.Header, time.Now())}
	if resp.Body == nil {
		return e
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err != nil && len(head) == 0 {
		return e
	}
	decodeBody(e, head)
	return e
}

// decodeBody fills e's code and message from an error body:
// {"error": {"code", "type", "message"}} or {"error": "message"}; a code
// that is not a string gives way to the type.
func decodeBody(e *Error, body []byte) {
	if f := scanError(body); f.envelope {
		fill(e, f.inner)
	}
}

// fill sets e's code and message from an error object's fields.
func fill(e *Error, f errorFields) {
	e.Message = f.message
	if f.code != "" {
		e.Code = f.code
	} else if t := strings.TrimSpace(f.typ); t != "error" { // "error" names an envelope, not the error
		e.Code = t
	}
}

// errorFields are what an error object says of itself.
type errorFields struct {
	code, typ, message string
}

// scanned is what scanError found: the top object's own fields, and its
// "error" member's.
type scanned struct {
	top, inner errorFields
	envelope   bool // the top object has an "error" member
	ok         bool // data began as a JSON object
}

// scanError reads an error body or event token by token: unlike a decode
// of the whole, it finds the fields in a body cut short (the part a limit
// let through), and keeps at most 1 KiB of any string it keeps.
func scanError(data []byte) scanned {
	var out scanned
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return out
	}
	out.ok = true
	readObject(dec, &out.top, func(key string) bool {
		if key != "error" {
			return false
		}
		t, err := dec.Token()
		if err != nil {
			return true
		}
		switch v := t.(type) {
		case string:
			out.envelope = true
			out.inner.message = engine.Truncate(v, maxAPIMessage)
		case json.Delim:
			if v == '{' {
				out.envelope = true
				readObject(dec, &out.inner, nil)
			} else {
				skipRest(dec, 1)
			}
		}
		return true
	})
	return out
}

// readObject reads an object's members after its '{', keeping code, type
// and message in f; member is asked first about each key, and reads the
// value itself when it reports true.
func readObject(dec *json.Decoder, f *errorFields, member func(key string) bool) {
	for {
		t, err := dec.Token()
		if err != nil {
			return
		}
		key, ok := t.(string)
		if !ok {
			return // the object's end
		}
		if member != nil && member(key) {
			continue
		}
		if t, err = dec.Token(); err != nil {
			return
		}
		switch v := t.(type) {
		case json.Delim:
			skipRest(dec, 1) // a nested value: nothing of it is kept
		case string:
			switch key {
			case "code":
				f.code = strings.TrimSpace(v)
			case "type":
				f.typ = v
			case "message":
				f.message = engine.Truncate(v, maxAPIMessage)
			}
		}
	}
}

// skipRest skips tokens until depth nested values have closed.
func skipRest(dec *json.Decoder, depth int) {
	for depth > 0 {
		t, err := dec.Token()
		if err != nil {
			return
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
}

// ErrorEventFrom decodes the data of a stream's error event: OpenAI's
// {"error": {…}}, Anthropic's {"type": "error", "error": {…}}, or an error
// object itself. The error has no status (the answer began with 200); an
// error event whose code no rule knows is still Transient, with error.type
// "stream_error": a provider that fails in the middle of an answer may not
// the next time.
func ErrorEventFrom(data []byte) *Error {
	e := &Error{event: true}
	switch f := scanError(data); {
	case f.envelope:
		fill(e, f.inner)
	case f.ok:
		fill(e, f.top) // an error object itself
	default:
		e.Message = engine.Truncate(strings.TrimSpace(string(data)), maxAPIMessage)
	}
	return e
}

// AsAnswer returns the provider's answer that err stands for, wherever in
// its chain it is and whoever decoded it: retrace's own *Error, or an
// SDK's error recognised by its shape:
//
//   - openai-go (v1, v3) and anthropic-sdk-go: StatusCode, Code/Type (a
//     field, or anthropic's Type() method), Message and the *http.Response
//     whose headers carry Retry-After;
//   - go-openai and eino-ext's copy of it (whose APIError does not unwrap):
//     HTTPStatusCode, Code (any), Type and Message; its RequestError's Body;
//   - Google's genai (genkit's googlegenai plugin): Code (the HTTP status),
//     Status and Message;
//   - openai-go's stream error (an error event): its Event's Data.
//
// An error in a 2xx answer (anthropic-sdk-go's mid-stream error event) is an
// error event, without a status. The answer's message is cut to
// 1 KiB.
func AsAnswer(err error) (*Error, bool) {
	api, _ := providerAnswer(err)
	return api, api != nil
}

// providerAnswer is AsAnswer, and whether the answer was decoded from an
// SDK's error rather than found as an *Error.
func providerAnswer(err error) (api *Error, decoded bool) {
	var c errchain.Chain
	c.Add(err)
	return providerAnswerIn(&c)
}

// providerAnswerIn is providerAnswer on a chain already read: the first
// error of it that is an *Error, or that has an SDK's error's shape.
func providerAnswerIn(c *errchain.Chain) (*Error, bool) {
	for _, err := range c.All() {
		if e, ok := err.(*Error); ok {
			if e.answer() {
				return e, false
			}
			continue // a layer's stop, a class of its own: what it wraps may be an answer
		}
		if e := apiShape(err); e != nil {
			return e, true
		}
	}
	return nil, false
}

// stdErrorPkgs are the standard library's packages whose errors a chain
// most often holds (a wrapped text, a network or TLS failure): none is an
// SDK's shape, and looking for its fields by name is most of what reading a
// plain error would cost.
var stdErrorPkgs = map[string]bool{
	"errors": true, "fmt": true, "net": true, "net/url": true, "net/http": true, "os": true,
	"io/fs": true, "syscall": true, "context": true, "crypto/tls": true, "crypto/x509": true,
}

var (
	responseType = reflect.TypeFor[*http.Response]()
	bytesType    = reflect.TypeFor[[]byte]()
	// The types of errors.New's and fmt.Errorf's errors, the most common of
	// all: known by their type alone, they cost no reflection at all.
	textTypes = [...]reflect.Type{
		reflect.TypeOf(errors.New("")),
		reflect.TypeOf(fmt.Errorf("%w", errors.New(""))),
		reflect.TypeOf(fmt.Errorf("%w %w", errors.New(""), errors.New(""))),
	}
)

// apiShape decodes an SDK's error by its exported fields, or returns nil
// when err has not the shape of a provider's answer (see AsAnswer).
func apiShape(err error) *Error {
	if t := reflect.TypeOf(err); t == textTypes[0] || t == textTypes[1] || t == textTypes[2] {
		return nil
	}
	v := reflect.ValueOf(err)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || stdErrorPkgs[v.Type().PkgPath()] {
		return nil
	}
	status, hasStatus := intField(v, "StatusCode")
	if !hasStatus {
		status, hasStatus = intField(v, "HTTPStatusCode")
	}
	if !hasStatus && !isGenAI(v) {
		if ev := field(v, "Event", nil); ev.IsValid() && ev.Kind() == reflect.Struct {
			if data := field(ev, "Data", bytesType); data.IsValid() && len(data.Bytes()) > 0 {
				return ErrorEventFrom(data.Bytes())
			}
		}
		return nil // no SDK's shape: most errors, made for nothing if e were made first
	}
	e := &Error{}
	if hasStatus {
		e.Message = engine.Truncate(stringField(v, "Message"), maxAPIMessage)
		e.Code = codeField(v)
		if e.Code == "" {
			e.Code = typeOf(err, v)
		}
		if r := field(v, "Response", responseType); r.IsValid() && !r.IsNil() {
			if resp := r.Interface().(*http.Response); resp.Header != nil {
				e.RetryAfter = engine.ParseRetryAfter(resp.Header, time.Now())
			}
		}
		if b := field(v, "Body", bytesType); b.IsValid() && e.Code == "" && e.Message == "" {
			decodeBody(e, b.Bytes())
		}
	} else { // a genai.APIError
		status, _ = intField(v, "Code")
		e.Message = engine.Truncate(stringField(v, "Message"), maxAPIMessage)
		e.Code = stringField(v, "Status")
	}
	if status >= 200 && status < 300 {
		// An error inside a successful answer is a stream's error event.
		status, e.event = 0, true
	}
	if status < 400 && e.Code == "" && e.Message == "" {
		return nil // a transport failure beneath (go-openai's RequestError of a refused connection)
	}
	if status >= 400 && status < 600 {
		e.StatusCode = status
	}
	return e
}

// field returns v's exported field name, of type t when t is not nil.
func field(v reflect.Value, name string, t reflect.Type) reflect.Value {
	sf, ok := v.Type().FieldByName(name)
	if !ok || !sf.IsExported() || len(sf.Index) != 1 || t != nil && sf.Type != t {
		return reflect.Value{}
	}
	return v.Field(sf.Index[0])
}

func intField(v reflect.Value, name string) (int, bool) {
	f := field(v, name, nil)
	switch {
	case !f.IsValid():
		return 0, false
	case f.CanInt():
		return int(f.Int()), true
	}
	return 0, false
}

func stringField(v reflect.Value, name string) string {
	if f := field(v, name, nil); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

// codeField is the Code field as text: a string, or go-openai's any that
// holds a string or a number.
func codeField(v reflect.Value) string {
	f := field(v, "Code", nil)
	if !f.IsValid() {
		return ""
	}
	if f.Kind() == reflect.Interface {
		if f.IsNil() {
			return ""
		}
		f = f.Elem()
	}
	switch {
	case f.Kind() == reflect.String:
		return strings.TrimSpace(f.String())
	case f.CanInt():
		return strconv.FormatInt(f.Int(), 10)
	case f.CanFloat() && f.Float() == float64(int64(f.Float())):
		return strconv.FormatInt(int64(f.Float()), 10)
	}
	return ""
}

// typeOf is the error's type: a Type field, else a Type() method with a
// string result (anthropic-sdk-go's).
func typeOf(err error, v reflect.Value) string {
	if t := stringField(v, "Type"); t != "" {
		return strings.TrimSpace(t)
	}
	m := reflect.ValueOf(err).MethodByName("Type")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 || m.Type().Out(0).Kind() != reflect.String {
		return ""
	}
	return strings.TrimSpace(m.Call(nil)[0].String())
}

// isGenAI reports whether v has the shape of Google genai's APIError: an
// int Code that is an HTTP status, beside a Status name and a Message.
func isGenAI(v reflect.Value) bool {
	code, ok := intField(v, "Code")
	return ok && code >= 400 && code < 600 && field(v, "Status", nil).Kind() == reflect.String &&
		field(v, "Message", nil).Kind() == reflect.String
}
