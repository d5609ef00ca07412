package httpapi

import (
	"context"
	"net/http"
	"time"

	parley "github.com/parleyhq/parley"
)

func (s *server) handleHealth() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

func (s *server) handleReady() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := s.Ready(ctx); err != nil {
				s.Log.Warn("not ready", "err", err)
				writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "active_runs": s.Runs.ActiveCount()})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "active_runs": s.Runs.ActiveCount()})
	})
}

func (s *server) handleModels() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		models := []ModelInfo{}
		if s.Models != nil {
			models = append(models, s.Models()...)
		}
		writeJSON(w, http.StatusOK, map[string]any{"models": models})
	})
}

func (s *server) handleTools() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tools, servers := []ToolInfo{}, []ServerInfo{}
		if s.Tools != nil {
			t, sv := s.Tools()
			tools, servers = append(tools, t...), append(servers, sv...)
		}
		writeJSON(w, http.StatusOK, map[string]any{"tools": tools, "servers": servers})
	})
}

func (s *server) handleNotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, parley.Errorf(parley.ECNotFound, "no route for %s %s", r.Method, truncate(r.URL.Path, 100)))
	})
}
