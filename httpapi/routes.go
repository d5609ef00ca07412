package httpapi

// routes lists every endpoint of the API.
func (s *server) routes() {
	s.mux.Handle("GET /healthz", s.handleHealth())
	s.mux.Handle("GET /readyz", s.handleReady())

	s.mux.Handle("POST /api/v1/sessions", s.handleCreateSession())
	s.mux.Handle("GET /api/v1/sessions", s.handleListSessions())
	s.mux.Handle("GET /api/v1/sessions/{id}", s.handleGetSession())
	s.mux.Handle("PATCH /api/v1/sessions/{id}", s.handleRenameSession())
	s.mux.Handle("DELETE /api/v1/sessions/{id}", s.handleDeleteSession())
	s.mux.Handle("GET /api/v1/sessions/{id}/messages", s.handleListMessages())
	s.mux.Handle("GET /api/v1/sessions/{id}/records", s.handleRecords())
	s.mux.Handle("GET /api/v1/usage", s.handleUsage())

	s.mux.Handle("POST /api/v1/chat", s.handleChat())
	s.mux.Handle("POST /api/v1/chat/stream", s.handleChatStream())

	s.mux.Handle("GET /api/v1/models", s.handleModels())
	s.mux.Handle("GET /api/v1/tools", s.handleTools())

	s.mux.Handle("/api/", s.handleNotFound())
}
