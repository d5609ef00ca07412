package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files"
)

// Routes of the files API (issue 20). The upload streams each part of a multipart body into the
// blob store: no upload is ever held whole in memory, and the body's time limit is an idle limit
// (BodyTimeout without a byte), not a bound on the whole transfer.

// maxUploadFields bounds the non-file fields of an upload and the bytes of each.
const (
	maxUploadFields    = 8
	maxUploadFieldSize = 1 << 10
)

// fileView is a file as the API shows it.
type fileView struct {
	parley.File
	URL string `json:"url"` // the content's path
}

func viewOf(f *parley.File) fileView {
	return fileView{File: *f, URL: "/api/v1/files/" + f.ID + "/content"}
}

func (s *server) filesEnabled() error {
	if s.Files == nil {
		return parley.Errorf(parley.ECNotFound, "file uploads are not enabled on this server")
	}
	return nil
}

// handleUpload is POST /api/v1/files: multipart/form-data with one or more file parts, and an
// optional session_id (a form field before the files, or a query parameter).
func (s *server) handleUpload() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.filesEnabled(); err != nil {
			writeError(w, err)
			return
		}
		owner := identityOf(r).User
		sessionID := r.URL.Query().Get("session_id")
		if sessionID != "" {
			if err := s.ownsSession(r, owner, sessionID); err != nil {
				writeError(w, err)
				return
			}
		}
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
			writeError(w, parley.Errorf(parley.ECInvalid, "Content-Type must be multipart/form-data with a boundary"))
			return
		}
		rc := http.NewResponseController(w)
		body := &idleReader{r: r.Body, rc: rc, idle: s.BodyTimeout}
		defer rc.SetReadDeadline(time.Time{})
		mr := multipart.NewReader(body, params["boundary"])

		sessionChecked := true // the query's session, if any, is checked
		checkSession := func() error {
			if sessionChecked || sessionID == "" {
				return nil
			}
			sessionChecked = true
			return s.ownsSession(r, owner, sessionID)
		}
		var stored []*parley.File
		fail := func(err error) {
			// The request is all or nothing: files stored before the failure go.
			for _, f := range stored {
				_ = s.Files.Delete(context.WithoutCancel(r.Context()), owner, f.ID)
			}
			if isTimeout(err) {
				err = parley.Errorf(parley.ECInvalid, "request body: no data for %s", s.BodyTimeout)
			}
			if parley.CodeOf(err) == parley.ECTooLarge || parley.CodeOf(err) == parley.ECQuota {
				w.Header().Set("Connection", "close") // the rest of the body is not read
			}
			writeError(w, err)
		}
		fields := 0
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fail(parley.WrapError(parley.ECInvalid, err, "request body: malformed multipart data"))
				return
			}
			name := part.FormName()
			if part.FileName() == "" && name != "file" && name != "files" {
				fields++
				if name != "session_id" || fields > maxUploadFields {
					part.Close()
					fail(parley.Errorf(parley.ECInvalid, "unknown form field %q: send session_id and file parts", truncate(name, 40)))
					return
				}
				v, err := io.ReadAll(io.LimitReader(part, maxUploadFieldSize+1))
				part.Close()
				if err != nil || len(v) > maxUploadFieldSize {
					fail(parley.Errorf(parley.ECInvalid, "session_id: malformed or too long"))
					return
				}
				if len(stored) > 0 {
					fail(parley.Errorf(parley.ECInvalid, "session_id must come before the files"))
					return
				}
				sessionID, sessionChecked = string(v), false
				continue
			}
			if len(stored) >= files.MaxAttachments {
				part.Close()
				fail(parley.Errorf(parley.ECInvalid, "at most %d files per upload", files.MaxAttachments))
				return
			}
			if err := checkSession(); err != nil {
				part.Close()
				fail(err)
				return
			}
			src := &readErr{r: part}
			f, err := s.Files.Upload(r.Context(), owner, sessionID, part.FileName(), src)
			part.Close()
			if err != nil {
				if src.err != nil && parley.CodeOf(err) == parley.ECInternal {
					// The body failed (the client left, sent malformed data or stalled), not
					// the store.
					if isTimeout(src.err) {
						err = src.err
					} else {
						err = parley.WrapError(parley.ECInvalid, src.err, "request body: the upload was cut or malformed")
					}
				}
				fail(err)
				return
			}
			stored = append(stored, f)
		}
		if len(stored) == 0 {
			fail(parley.Errorf(parley.ECInvalid, "no file in the upload: send one or more parts with a filename"))
			return
		}
		out := make([]fileView, len(stored))
		for i, f := range stored {
			out[i] = viewOf(f)
		}
		writeJSON(w, http.StatusCreated, map[string]any{"files": out})
	})
}

// readErr remembers the error of the reader it wraps.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}

// ownsSession checks that owner owns session id (403 / 404, as ownedSession).
func (s *server) ownsSession(r *http.Request, owner, id string) error {
	if !validID(id) {
		return parley.Errorf(parley.ECNotFound, "session %q not found", truncate(id, 80))
	}
	sess, err := s.Store.GetSession(r.Context(), id)
	if err != nil {
		if parley.CodeOf(err) == parley.ECNotFound {
			return parley.Errorf(parley.ECNotFound, "session %q not found", id)
		}
		return err
	}
	if sess.Owner != owner {
		return parley.Errorf(parley.ECForbidden, "session %q belongs to another user", id)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// idleReader reads a request body with a read deadline that moves with each read: a body may take
// as long as it needs while bytes keep coming.
type idleReader struct {
	r    io.Reader
	rc   *http.ResponseController
	idle time.Duration
	last time.Time
}

func (b *idleReader) Read(p []byte) (int, error) {
	if now := time.Now(); now.Sub(b.last) > time.Second {
		b.last = now
		_ = b.rc.SetReadDeadline(now.Add(b.idle))
	}
	return b.r.Read(p)
}

// ownedFile loads the file named in the path for its owner (403 / 404).
func (s *server) ownedFile(r *http.Request) (*parley.File, error) {
	if err := s.filesEnabled(); err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	if !validID(id) {
		return nil, parley.Errorf(parley.ECNotFound, "file %q not found", truncate(id, 80))
	}
	return s.Files.Get(r.Context(), identityOf(r).User, id)
}

func (s *server) handleGetFile() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := s.ownedFile(r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, viewOf(f))
	})
}

// handleFileContent is GET /api/v1/files/{id}/content: the bytes, with Range and conditional
// requests (ETag: the SHA-256). Only images in files.IsImage are served inline; everything else
// is an attachment, and nothing is sniffed by the browser or run in Parley's origin.
func (s *server) handleFileContent() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := s.ownedFile(r)
		if err != nil {
			writeError(w, err)
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
		h.Set("Cache-Control", "private, no-cache")
		disposition := "attachment"
		if files.IsImage(f.MediaType) {
			disposition = "inline"
		}
		h.Set("Content-Disposition", contentDisposition(disposition, f.Name))
		http.ServeContent(w, r, "", f.CreatedAt, rd)
	})
}

// contentDisposition names the file in ASCII (non-ASCII and quotes replaced) and in UTF-8
// (RFC 6266 / 5987).
func contentDisposition(kind, name string) string {
	ascii := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '_'
		}
		return r
	}, name)
	return fmt.Sprintf(`%s; filename="%s"; filename*=UTF-8''%s`, kind, ascii, url.PathEscape(name))
}

func (s *server) handleDeleteFile() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := s.ownedFile(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if err := s.Files.Delete(r.Context(), f.Owner, f.ID); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// handleSessionFiles is GET /api/v1/sessions/{id}/files: the session's files, oldest first, a
// page at a time (limit, cursor: the next_cursor of the page before).
func (s *server) handleSessionFiles() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if err := s.filesEnabled(); err != nil {
			writeError(w, err)
			return
		}
		limit, err := intParam(r, "limit", 100, 1, 500)
		if err != nil {
			writeError(w, err)
			return
		}
		cursor := r.URL.Query().Get("cursor")
		if cursor != "" && !validID(cursor) {
			writeError(w, parley.Errorf(parley.ECInvalid, "cursor: malformed"))
			return
		}
		list, err := s.Store.ListSessionFiles(r.Context(), sess.ID, cursor, limit+1)
		if err != nil {
			writeError(w, err)
			return
		}
		next := ""
		if len(list) > limit {
			list = list[:limit]
			next = list[limit-1].ID
		}
		out := make([]fileView, len(list))
		for i := range list {
			out[i] = viewOf(&list[i])
		}
		writeJSON(w, http.StatusOK, map[string]any{"files": out, "next_cursor": next})
	})
}
