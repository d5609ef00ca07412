package httpapi

import (
	"net/http"
	"strconv"
	"sync"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/artifact"
)

// artifactOut is an artifact as the API returns it: with the signed path of its page.
type artifactOut struct {
	parley.Artifact
	RenderURL string `json:"render_url"`
}

type artifactList struct {
	Artifacts []artifactOut `json:"artifacts"`
}

func (s *server) artifactOut(a parley.Artifact) artifactOut {
	return artifactOut{Artifact: a, RenderURL: s.ArtifactURLs.RenderURL(a.ID, a.Version)}
}

// handleListArtifacts returns the latest version of each artifact of a session the caller owns.
func (s *server) handleListArtifacts() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		list, err := s.Artifacts.ListArtifacts(r.Context(), sess.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		out := artifactList{Artifacts: make([]artifactOut, 0, len(list))}
		for _, a := range list {
			out.Artifacts = append(out.Artifacts, s.artifactOut(a))
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// handleGetArtifact returns one version of an artifact (?version=N; the latest without it) of a
// session the caller owns.
func (s *server) handleGetArtifact() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		version := 0
		if v := r.URL.Query().Get("version"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				writeError(w, parley.Errorf(parley.ECInvalid, "version: want a positive whole number, not %q", truncate(v, 20)))
				return
			}
			version = n
		}
		notFound := parley.Errorf(parley.ECNotFound, "artifact %q not found", truncate(id, 80))
		if !validID(id) {
			writeError(w, notFound)
			return
		}
		a, err := s.Artifacts.GetArtifact(r.Context(), id, version)
		if parley.CodeOf(err) == parley.ECNotFound {
			if version > 0 {
				notFound = parley.Errorf(parley.ECNotFound, "artifact %q has no version %d", id, version)
			}
			writeError(w, notFound)
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		sess, err := s.Store.GetSession(r.Context(), a.SessionID)
		if err != nil || sess.Owner != identityOf(r).User {
			// Another user's artifact is not found, as another user's session is forbidden:
			// either way nothing of it is shown.
			writeError(w, parley.Errorf(parley.ECNotFound, "artifact %q not found", id))
			return
		}
		writeJSON(w, http.StatusOK, s.artifactOut(*a))
	})
}

// pageCache keeps the last rendered pages: a React page costs a bundle of React.
type pageCache struct {
	mu    sync.Mutex
	order []string
	pages map[string]*artifact.Page
}

const pageCacheSize = 32

func (c *pageCache) get(key string) *artifact.Page {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pages[key]
}

func (c *pageCache) put(key string, p *artifact.Page) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pages == nil {
		c.pages = map[string]*artifact.Page{}
	}
	if _, ok := c.pages[key]; ok {
		return
	}
	if len(c.order) >= pageCacheSize {
		delete(c.pages, c.order[0])
		c.order = c.order[1:]
	}
	c.order = append(c.order, key)
	c.pages[key] = p
}

// handleRenderArtifact serves an artifact's version as a page for a sandboxed iframe. The URL's
// signature (render_url) is its authorization: an iframe sends no API key. The page's CSP
// sandboxes it (allow-scripts, not allow-same-origin: an opaque origin, which cannot read
// Parley's cookies or storage or call its API as the user) and allows no network.
func (s *server) handleRenderArtifact() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !validID(id) {
			writeError(w, parley.Errorf(parley.ECNotFound, "artifact %q not found", truncate(id, 80)))
			return
		}
		version, err := s.ArtifactURLs.Verify(id, r.URL.Query())
		if err != nil {
			writeError(w, parley.Errorf(parley.ECForbidden, "%v", err))
			return
		}
		key := id + "@" + strconv.Itoa(version)
		page := s.pages.get(key)
		if page == nil {
			a, err := s.Artifacts.GetArtifact(r.Context(), id, version)
			if err != nil {
				writeError(w, err)
				return
			}
			if page, err = artifact.Render(a); err != nil {
				writeError(w, parley.Errorf(parley.ECInvalid, "%v", err))
				return
			}
			s.pages.put(key, page)
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", page.CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "private, max-age=300")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(page.HTML)
	})
}
