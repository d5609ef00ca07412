package httpapi

import (
	"net/http"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/httpapi/openaiapi"
)

// The OpenAI-compatible API (package openaiapi) behind the same pipeline as the native one: rate
// limit, key (Authorization: Bearer), run budget, body limits, in that order; every error,
// the pipeline's included, in OpenAI's shape.

// openAI is the backend of the /v1 routes: Deps.OpenAI, or one on the chat service alone (it
// answers stateful requests; stateless and gateway ones are refused with a reason).
func (s *server) openAI() *openaiapi.Backend {
	b := s.OpenAI
	if b == nil {
		b = &openaiapi.Backend{}
	}
	if b.Chat == nil {
		b.Chat = s.Chat
	}
	if b.Models == nil && s.Models != nil {
		b.Models = func() []openaiapi.Model { return openAIModels(s.Models()) }
	}
	if b.WriteTimeout <= 0 {
		b.WriteTimeout = s.WriteTimeout
	}
	if b.Heartbeat <= 0 {
		b.Heartbeat = s.Heartbeat
	}
	if b.Log == nil {
		b.Log = s.Log
	}
	b.Fail = writeOpenAIError
	return b
}

// openAIPolicy is p with its errors in OpenAI's shape.
func openAIPolicy(p policy) policy {
	p.fail = writeOpenAIError
	return p
}

// writeOpenAIError is writeError in OpenAI's shape.
func writeOpenAIError(w http.ResponseWriter, err error) {
	if n, ok := w.(interface{ noteError(error) }); ok {
		n.noteError(err) // for the log of 5xx answers (observe)
	}
	openaiapi.WriteError(w, statusOf(parley.CodeOf(err)), err)
}

// openAIModels lists the models a client may name: each provider/model, and the default model of
// a provider that takes any name ("provider/*").
func openAIModels(models []ModelInfo) []openaiapi.Model {
	out := []openaiapi.Model{}
	seen := map[string]bool{}
	add := func(id, owner string) {
		if !seen[id] {
			seen[id] = true
			out = append(out, openaiapi.Model{ID: id, Object: "model", OwnedBy: owner})
		}
	}
	for _, m := range models {
		if m.Default {
			add(m.ID, m.Provider)
		}
	}
	for _, m := range models {
		if len(m.ID) < 2 || m.ID[len(m.ID)-2:] != "/*" {
			add(m.ID, m.Provider)
		}
	}
	return out
}

func (s *server) handleOpenAIModels(b *openaiapi.Backend) http.Handler {
	return http.HandlerFunc(b.ListModels)
}

func (s *server) handleOpenAIChat(b *openaiapi.Backend) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.Complete(w, r, identityOf(r).User, bodyOf[openaiapi.ChatRequest](r))
	})
}

func (s *server) handleOpenAINotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeOpenAIError(w, parley.Errorf(parley.ECNotFound, "no route for %s %s", r.Method, truncate(r.URL.Path, 100)))
	})
}
