package httpapi

import (
	"github.com/parleyhq/parley/approval"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/web"
)

// routes lists every endpoint of the API. Each one under /api/v1 goes through the pipeline
// (pipe, in guard.go) with its policy; health probes do not.
func (s *server) routes() {
	s.mux.Handle("GET /healthz", s.handleHealth())
	s.mux.Handle("GET /readyz", s.handleReady())

	user := policy{}
	s.mux.Handle("POST /api/v1/sessions", s.pipe(policy{body: jsonBody(true, checkNewTitle)}, s.handleCreateSession()))
	s.mux.Handle("GET /api/v1/sessions", s.pipe(user, s.handleListSessions()))
	s.mux.Handle("GET /api/v1/sessions/{id}", s.pipe(user, s.handleGetSession()))
	s.mux.Handle("PATCH /api/v1/sessions/{id}", s.pipe(policy{body: jsonBody(false, checkRename)}, s.handleRenameSession()))
	s.mux.Handle("DELETE /api/v1/sessions/{id}", s.pipe(user, s.handleDeleteSession()))
	s.mux.Handle("GET /api/v1/sessions/{id}/messages", s.pipe(user, s.handleListMessages()))
	s.mux.Handle("GET /api/v1/sessions/{id}/records", s.pipe(user, s.handleRecords()))
	s.mux.Handle("GET /api/v1/usage", s.pipe(user, s.handleUsage()))
	s.mux.Handle("GET /api/v1/sessions/{id}/stream", s.pipe(user, s.handleSessionStream()))
	s.mux.Handle("POST /api/v1/sessions/{id}/abort", s.pipe(user, s.handleControl("abort")))
	s.mux.Handle("POST /api/v1/sessions/{id}/pause", s.pipe(user, s.handleControl("pause")))
	s.mux.Handle("POST /api/v1/sessions/{id}/resume", s.pipe(user, s.handleControl("resume")))
	s.mux.Handle("POST /api/v1/sessions/{id}/retry", s.pipe(policy{body: jsonBody(true, s.Chat.ValidateRetry), run: true}, s.handleRetry()))
	// Branches (issue 23, branch.go).
	s.mux.Handle("GET /api/v1/sessions/{id}/tree", s.pipe(user, s.handleTree()))
	s.mux.Handle("PUT /api/v1/sessions/{id}/leaf", s.pipe(policy{body: jsonBody(false, checkMessageRef)}, s.handleSetLeaf()))
	s.mux.Handle("POST /api/v1/sessions/{id}/fork", s.pipe(policy{body: jsonBody(false, checkMessageRef)}, s.handleFork()))
	s.mux.Handle("POST /api/v1/sessions/{id}/messages/{message_id}/edit", s.pipe(policy{body: jsonBody(false, s.checkEdit), run: true}, s.handleEdit()))
	s.mux.Handle("POST /api/v1/sessions/{id}/messages/{message_id}/regenerate", s.pipe(policy{body: jsonBody(true, s.Chat.ValidateRetry), run: true}, s.handleRegenerate()))
	s.mux.Handle("GET /api/v1/sessions/{id}/approvals", s.pipe(user, s.handleListApprovals()))
	s.mux.Handle("POST /api/v1/sessions/{id}/approvals/{call_id}", s.pipe(policy{body: jsonBody(false, (*approval.Answer).Check)}, s.handleDecideApproval()))
	s.mux.Handle("GET /api/ws", s.pipe(user, s.handleWS()))

	// Files (issue 20).
	s.mux.Handle("POST /api/v1/files", s.pipe(user, s.handleUpload()))
	s.mux.Handle("GET /api/v1/files/{id}", s.pipe(user, s.handleGetFile()))
	s.mux.Handle("GET /api/v1/files/{id}/content", s.pipe(user, s.handleFileContent()))
	s.mux.Handle("DELETE /api/v1/files/{id}", s.pipe(user, s.handleDeleteFile()))
	s.mux.Handle("GET /api/v1/sessions/{id}/files", s.pipe(user, s.handleSessionFiles()))
	// Workspace (issue 20): todo lists, projects and their memory (workspace.go).
	s.mux.Handle("GET /api/v1/sessions/{id}/todos", s.pipe(user, s.handleTodos()))
	s.mux.Handle("GET /api/v1/projects", s.pipe(user, s.handleListProjects()))
	s.mux.Handle("POST /api/v1/projects", s.pipe(policy{body: jsonBody(false, checkNewProject)}, s.handleCreateProject()))
	s.mux.Handle("GET /api/v1/projects/{id}", s.pipe(user, s.handleGetProject()))
	s.mux.Handle("PATCH /api/v1/projects/{id}", s.pipe(policy{body: jsonBody(false, checkProjectPatch)}, s.handlePatchProject()))
	s.mux.Handle("DELETE /api/v1/projects/{id}", s.pipe(user, s.handleDeleteProject()))
	s.mux.Handle("GET /api/v1/projects/{id}/memory", s.pipe(user, s.handleListMemory()))
	s.mux.Handle("POST /api/v1/projects/{id}/memory", s.pipe(policy{body: jsonBody(false, checkMemory)}, s.handleAddMemory()))
	s.mux.Handle("PATCH /api/v1/projects/{id}/memory/{entry}", s.pipe(policy{body: jsonBody(false, checkMemory)}, s.handlePatchMemory()))
	s.mux.Handle("DELETE /api/v1/projects/{id}/memory/{entry}", s.pipe(user, s.handleDeleteMemory()))

	chatReq := policy{body: jsonBody[chat.Request](false, s.checkChat), run: true}
	s.mux.Handle("POST /api/v1/chat", s.pipe(chatReq, s.handleChat()))
	s.mux.Handle("POST /api/v1/chat/stream", s.pipe(chatReq, s.handleChatStream()))

	// The AI SDK UI message stream (uichat.go, package uistream).
	s.mux.Handle("POST /api/v1/ui/chat", s.pipe(policy{body: jsonBody(false, s.checkUIChat), run: true}, s.handleUIChat()))
	s.mux.Handle("GET /api/v1/ui/chat/{id}/stream", s.pipe(user, s.handleUIStream()))
	s.mux.Handle("GET /api/v1/ui/chat/{id}/messages", s.pipe(user, s.handleUIMessages()))

	s.mux.Handle("GET /api/v1/models", s.pipe(user, s.handleModels()))
	s.mux.Handle("GET /api/v1/tools", s.pipe(user, s.handleTools()))

	if s.Artifacts != nil && s.ArtifactURLs != nil {
		s.mux.Handle("GET /api/v1/sessions/{id}/artifacts", s.pipe(user, s.handleListArtifacts()))
		s.mux.Handle("GET /api/v1/artifacts/{id}", s.pipe(user, s.handleGetArtifact()))
		// Authorized by its signed URL, not a key: an iframe sends none.
		s.mux.Handle("GET /api/v1/artifacts/{id}/render", s.pipe(policy{open: true}, s.handleRenderArtifact()))
	}
	if s.Files != nil && s.ArtifactURLs != nil {
		// Images the image tools stored: authorized by their signed URL (images.go).
		s.mux.Handle("GET /api/v1/images/{id}", s.pipe(policy{open: true}, s.handleSignedImage()))
	}

	s.mux.Handle("GET /api/v1/me", s.pipe(user, s.handleMe()))
	s.mux.Handle("POST /api/v1/auth/guest", s.pipe(policy{open: true}, s.handleGuest()))
	admin := policy{admin: true}
	s.mux.Handle("GET /api/v1/admin/keys", s.pipe(admin, s.handleListKeys()))
	s.mux.Handle("POST /api/v1/admin/keys", s.pipe(policy{admin: true, body: jsonBody(false, checkNewKey)}, s.handleCreateKey()))
	s.mux.Handle("DELETE /api/v1/admin/keys/{id}", s.pipe(admin, s.handleRevokeKey()))

	if s.MetricsHandler != nil {
		s.mux.Handle("GET /metrics", s.pipe(admin, s.MetricsHandler))
	} else { // served elsewhere (--metrics-addr) or not at all: not the UI's page either
		s.mux.Handle("GET /metrics", s.pipe(policy{open: true}, s.handleNotFound()))
	}

	// The OpenAI-compatible API (package openaiapi; httpapi/openai.go): errors in OpenAI's shape.
	oa := s.openAI()
	s.mux.Handle("GET /v1/models", s.pipe(openAIPolicy(user), s.handleOpenAIModels(oa)))
	s.mux.Handle("POST /v1/chat/completions", s.pipe(openAIPolicy(policy{body: jsonBody(false, oa.Check), run: true}), s.handleOpenAIChat(oa)))
	s.mux.Handle("/v1/", s.pipe(openAIPolicy(policy{open: true}), s.handleOpenAINotFound()))

	s.mux.Handle("/api/", s.pipe(policy{open: true}, s.handleNotFound()))
	// The browser UI (package web): every other path is the page or one of its files (GET/HEAD).
	s.mux.Handle("/", web.Handler())
}
