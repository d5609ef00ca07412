package httpapi

import (
	"net/http"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files"
	"github.com/parleyhq/parley/images"
)

// handleSignedImage is GET /api/v1/images/{id}?exp=…&sig=…: an image generate_image or
// edit_image stored, reached by the signed, expiring URL the tool returned (package images). The
// signature is the authorization, so an <img> tag can show it without an API key; an altered or
// expired URL is 403. Only images are served, never run: nosniff and a sandbox CSP.
func (s *server) handleSignedImage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !validID(id) {
			writeError(w, parley.Errorf(parley.ECNotFound, "image %q not found", truncate(id, 80)))
			return
		}
		if err := s.ArtifactURLs.Check(images.Purpose, id, r.URL.Query()); err != nil {
			writeError(w, parley.Errorf(parley.ECForbidden, "%v: ask for the image again (its tool result or image event has the URL)", err))
			return
		}
		f, err := s.Files.Lookup(r.Context(), id)
		if err != nil {
			writeError(w, err)
			return
		}
		if !files.IsImage(f.MediaType) {
			writeError(w, parley.Errorf(parley.ECNotFound, "image %q not found", truncate(id, 80)))
			return
		}
		rd, err := s.Files.Open(r.Context(), f)
		if err != nil {
			writeError(w, err)
			return
		}
		defer rd.Close()
		h := w.Header()
		h.Set("ETag", `"`+f.SHA256+`"`)
		h.Set("Content-Type", f.MediaType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
		h.Set("Cache-Control", "private, max-age=3600")
		h.Set("Content-Disposition", contentDisposition("inline", f.Name))
		http.ServeContent(w, r, "", f.CreatedAt, rd)
	})
}
