package retracemcp

// WaitSessions waits until every session the client has seen has ended and
// its duration is recorded.
func (c *Client) WaitSessions() { c.watching.Wait() }
