package session

// ErrorType is the stream error's error.type: "stream_dropped", the same on
// every span of the failure (the model call's, the session's), whatever
// the read error beneath it was.
func (e *StreamError) ErrorType() string { return "stream_dropped" }
