// Package files is Parley's file service (issue 20): uploads streamed into the blob store with
// their metadata in the store, downloads, deletion and the collection of blobs no file refers to,
// and the expansion of the file references of a history into what a model is sent.
//
// Blobs are content addressed: two files with the same bytes share one blob. A blob is deleted
// when the last file row that names it goes. An upload and a collection of the same bytes take
// the same lock (per process, striped by key): the upload inserts its row under the lock and then
// checks that the blob is still there, the collection counts the rows and deletes under it, so a
// collected blob is never acknowledged to an uploader (it gets 503 and sends again).
package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
)

// Defaults for a zero Config.
const (
	DefaultMaxFileBytes = 100 << 20
	DefaultTextBudget   = 100_000
	DefaultMaxInline    = 20 << 20
	// MaxAttachments bounds the files of one message.
	MaxAttachments = 20
)

// Store is what the service needs of the database.
type Store interface {
	parley.FileStore
	GetSession(ctx context.Context, id string) (*parley.Session, error)
}

// Config wires a Service.
type Config struct {
	Store Store
	Blobs parley.BlobStore
	// MaxFileBytes bounds one file (default 100 MiB; negative: no bound).
	MaxFileBytes int64
	// Quota bounds the bytes of each owner's files together (0: no quota).
	Quota int64
	// TextBudget is how many bytes of a text file, or of a PDF's extracted text, a model is given
	// (default 100,000); the rest is cut, with a note saying so.
	TextBudget int
	// MaxInline is the largest image or PDF a model is sent inline (default 20 MiB); a larger PDF
	// is sent as its text, a larger image as a note.
	MaxInline int64
	Log       *slog.Logger
	Now       func() time.Time
}

// Service handles files. It is safe for concurrent use.
type Service struct {
	cfg   Config
	locks [64]sync.Mutex
	pdfs  pdfCache
	// afterPut, in tests, runs between an upload's Put and its row (the window a collection of
	// the same bytes may fall in).
	afterPut func(key string)
	// resultImages, when set, says what images a tool message shows (SetResultImages).
	resultImages func(parley.Message) ResultImages
}

// ResultImages is what a tool message's result shows of images.
type ResultImages struct {
	// FileIDs are stored image files the result names (only ones the hook vouches for).
	FileIDs []string
	// Inline are data: URLs of images the result carries itself (not stored).
	Inline []string
	// Content, when set, is what the model is sent instead of the message's content (the result
	// without its inline images, which come as image parts instead).
	Content *parley.Content
}

func (r ResultImages) count() int { return len(r.FileIDs) + len(r.Inline) }

// SetResultImages makes Expand give the model, after each group of tool results, the images
// those results show: fn tells them for one tool message (images.ResultFiles). Call it before
// the Service is used.
func (s *Service) SetResultImages(fn func(parley.Message) ResultImages) { s.resultImages = fn }

// New returns a Service; zero Config fields take their defaults.
func New(cfg Config) *Service {
	if cfg.MaxFileBytes == 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.TextBudget <= 0 {
		cfg.TextBudget = DefaultTextBudget
	}
	if cfg.MaxInline <= 0 {
		cfg.MaxInline = DefaultMaxInline
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, pdfs: pdfCache{m: map[string]string{}}}
}

// MaxFileBytes is the size limit of one file (≤ 0: none).
func (s *Service) MaxFileBytes() int64 { return s.cfg.MaxFileBytes }

func (s *Service) lock(key string) *sync.Mutex {
	v, _ := strconv.ParseUint(key[:2], 16, 8)
	return &s.locks[v%uint64(len(s.locks))]
}

// TooLarge is the error of a file over the size limit.
func TooLarge(name string, limit int64) *parley.Error {
	return parley.Errorf(parley.ECTooLarge, "file %q is larger than the limit of %d bytes (--max-file-bytes)", name, limit)
}

// Upload streams r into the blob store and stores the file's metadata: owner's, in sessionID when
// it is set (the caller checked that owner owns it), named name (cleaned here). The media type is
// sniffed from the bytes. Over the size limit it is ECTooLarge, over the owner's quota ECQuota;
// then nothing is stored.
func (s *Service) Upload(ctx context.Context, owner, sessionID, name string, r io.Reader) (*parley.File, error) {
	name = CleanName(name)
	limit := max(s.cfg.MaxFileBytes, 0) // 0: no bound
	quotaBound := false
	var used int64
	if s.cfg.Quota > 0 {
		var err error
		if used, err = s.cfg.Store.FileBytes(ctx, owner); err != nil {
			return nil, err
		}
		if left := max(s.cfg.Quota-used, 0); limit == 0 || left < limit {
			limit, quotaBound = left, true
		}
	}
	check := &textCheck{}
	src := io.TeeReader(r, check)
	var info parley.BlobInfo
	var err error
	if quotaBound && limit == 0 {
		// The quota is spent: only an empty file fits.
		var one [1]byte
		if n, _ := io.ReadFull(src, one[:]); n > 0 {
			return nil, parley.QuotaExceeded(used, s.cfg.Quota)
		}
		info, err = s.cfg.Blobs.Put(ctx, eofReader{}, 0)
	} else {
		info, err = s.cfg.Blobs.Put(ctx, src, limit)
	}
	if err != nil {
		if parley.CodeOf(err) == parley.ECTooLarge {
			if quotaBound {
				return nil, parley.QuotaExceeded(used, s.cfg.Quota)
			}
			return nil, TooLarge(name, limit)
		}
		return nil, err
	}
	f := &parley.File{
		ID: parley.NewID(), Owner: owner, SessionID: sessionID, Name: name, Size: info.Size, SHA256: info.Key,
		MediaType: Sniff(check.head, check.text(), name), CreatedAt: s.cfg.Now().UTC().Truncate(time.Microsecond),
	}
	if s.afterPut != nil {
		s.afterPut(info.Key)
	}
	mu := s.lock(info.Key)
	mu.Lock()
	defer mu.Unlock()
	if err := s.cfg.Store.CreateFile(ctx, f, s.cfg.Quota); err != nil {
		s.collectLocked(context.WithoutCancel(ctx), info.Key)
		return nil, err
	}
	// A collection of the same bytes may have deleted the blob between Put and the lock: then
	// the file is not acknowledged.
	if _, err := s.cfg.Blobs.Stat(ctx, info.Key); err != nil {
		_ = s.cfg.Store.DeleteFile(context.WithoutCancel(ctx), f.ID)
		if errors.Is(err, parley.ErrNotFound) {
			return nil, parley.Errorf(parley.ECUnavailable, "the upload of %q raced with the deletion of identical content: send it again", name)
		}
		return nil, err
	}
	return f, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// Get returns owner's file id: another owner's file is ECForbidden, an unknown one ECNotFound.
func (s *Service) Get(ctx context.Context, owner, id string) (*parley.File, error) {
	f, err := s.cfg.Store.GetFile(ctx, id)
	if err != nil {
		if parley.CodeOf(err) == parley.ECNotFound {
			return nil, parley.Errorf(parley.ECNotFound, "file %q not found", id)
		}
		return nil, err
	}
	if f.Owner != owner {
		return nil, parley.Errorf(parley.ECForbidden, "file %q belongs to another user", id)
	}
	return f, nil
}

// Open returns a reader of f's bytes.
func (s *Service) Open(ctx context.Context, f *parley.File) (parley.BlobReader, error) {
	rd, err := s.cfg.Blobs.Open(ctx, f.SHA256)
	if errors.Is(err, parley.ErrNotFound) {
		return nil, parley.WrapError(parley.ECInternal, err, "the file's content is missing")
	}
	return rd, err
}

// Delete deletes owner's file id and collects its blob if no other file refers to it.
func (s *Service) Delete(ctx context.Context, owner, id string) error {
	f, err := s.Get(ctx, owner, id)
	if err != nil {
		return err
	}
	if err := s.cfg.Store.DeleteFile(ctx, f.ID); err != nil {
		return err
	}
	s.Collect(context.WithoutCancel(ctx), f.SHA256)
	return nil
}

// Collect deletes each blob of keys that no file refers to any more. Failures are logged: a
// blob left behind costs space, not correctness, and Sweep finds it later.
func (s *Service) Collect(ctx context.Context, keys ...string) {
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] || !parley.ValidBlobKey(k) {
			continue
		}
		seen[k] = true
		mu := s.lock(k)
		mu.Lock()
		s.collectLocked(ctx, k)
		mu.Unlock()
	}
}

func (s *Service) collectLocked(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := s.cfg.Store.BlobRefs(ctx, key)
	if err != nil {
		s.cfg.Log.Warn("files: counting blob references", "err", err)
		return
	}
	if n > 0 {
		return
	}
	if err := s.cfg.Blobs.Delete(ctx, key); err != nil && !errors.Is(err, parley.ErrNotFound) {
		s.cfg.Log.Warn("files: deleting an unreferenced blob", "err", err)
	}
}

// Sweep collects every blob no file refers to (blobs whose rows went with a session, or whose
// collection a crash interrupted). It is meant for the start of the server, before uploads: an
// upload whose row is not yet stored would lose its blob to it (and be refused, not lost).
func (s *Service) Sweep(ctx context.Context) (int, error) {
	var keys []string
	for info, err := range s.cfg.Blobs.Keys(ctx) {
		if err != nil {
			return 0, err
		}
		n, err := s.cfg.Store.BlobRefs(ctx, info.Key)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			keys = append(keys, info.Key)
		}
	}
	s.Collect(ctx, keys...)
	return len(keys), nil
}

// SessionBlobs returns the blob keys of a session's files, to collect after the session is
// deleted (its rows go with it).
func (s *Service) SessionBlobs(ctx context.Context, sessionID string) ([]string, error) {
	var keys []string
	after := ""
	for {
		page, err := s.cfg.Store.ListSessionFiles(ctx, sessionID, after, 500)
		if err != nil {
			return nil, err
		}
		for _, f := range page {
			keys = append(keys, f.SHA256)
		}
		if len(page) < 500 {
			return keys, nil
		}
		after = page[len(page)-1].ID
	}
}

// Usable reports whether file f may be referred to from session sessionID ("" for a session not
// created yet): f is in no session, in sessionID, or in one of its ancestors (the sessions it was
// forked from, transitively), whose messages its fork copies refer to. The caller has checked
// that f is the user's (Get).
func (s *Service) Usable(ctx context.Context, sessionID string, f *parley.File) (bool, error) {
	switch {
	case f.SessionID == "" || f.SessionID == sessionID:
		return true, nil
	case sessionID == "":
		return false, nil
	}
	return s.cfg.Store.InLineage(ctx, sessionID, f.SessionID)
}

// CheckAttach checks that owner may attach the files ids to a message: each exists, is theirs,
// and is Usable in sessionID (in no session, in sessionID or in one of its ancestors; "" for a
// session not created yet: then only files in no session). It returns them in order.
func (s *Service) CheckAttach(ctx context.Context, owner, sessionID string, ids []string) ([]*parley.File, error) {
	out := make([]*parley.File, 0, len(ids))
	for i, id := range ids {
		f, err := s.Get(ctx, owner, id)
		if err != nil {
			return nil, fmt.Errorf("file_ids[%d]: %w", i, err)
		}
		ok, err := s.Usable(ctx, sessionID, f)
		if err != nil {
			return nil, fmt.Errorf("file_ids[%d]: %w", i, err)
		}
		if !ok {
			return nil, parley.Errorf(parley.ECInvalid, "file_ids[%d]: file %q belongs to another session", i, id)
		}
		out = append(out, f)
	}
	return out, nil
}

// Attach puts the files that are in no session into sessionID; a file of another session (an
// ancestor's, in a fork) stays where it is.
func (s *Service) Attach(ctx context.Context, sessionID string, fs []*parley.File) error {
	for _, f := range fs {
		if f.SessionID == "" {
			if err := s.cfg.Store.AttachFile(ctx, f.ID, sessionID); err != nil {
				return err
			}
		}
	}
	return nil
}

// Part is the stored reference to f in a message: an OpenAI "file" content part naming it.
func Part(f *parley.File) parley.Part {
	return parley.Part{Type: "file", File: &parley.FileRef{FileID: f.ID, Filename: f.Name}}
}

// Lookup returns file id whoever owns it, for a route whose signed URL is its authorization
// (GET /api/v1/images/{id}); an unknown one is ECNotFound.
func (s *Service) Lookup(ctx context.Context, id string) (*parley.File, error) {
	f, err := s.cfg.Store.GetFile(ctx, id)
	if parley.CodeOf(err) == parley.ECNotFound {
		return nil, parley.Errorf(parley.ECNotFound, "file %q not found", id)
	}
	return f, err
}
