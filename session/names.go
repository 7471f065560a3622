package session

// ProviderName is gen_ai.provider.name of the session's first candidate,
// the provider an agent built on the session is said to use.
func (s *Session) ProviderName() string { return s.cfg.Provider.Name() }
