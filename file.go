package parley

import (
	"context"
	"time"
)

// File is an uploaded file's metadata (issue 20). Its bytes are a blob in the BlobStore, under
// SHA256: two files with the same bytes share one blob, which is collected when the last file
// that refers to it is deleted.
type File struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// SessionID is the session the file belongs to; "" until it is uploaded into or attached to
	// one. Deleting the session deletes the file.
	SessionID string    `json:"session_id,omitempty"`
	Name      string    `json:"name"`       // cleaned: no path, no control characters, bounded
	Size      int64     `json:"size"`       // bytes
	SHA256    string    `json:"sha256"`     // lower-case hex: the blob's key and the download's ETag
	MediaType string    `json:"media_type"` // sniffed from the bytes, never taken from the client
	CreatedAt time.Time `json:"created_at"`
}

// ECQuota classifies an upload refused because its owner's files would take more than their
// storage quota (413, like a file over the size limit: waiting does not help, deleting files does).
const ECQuota ErrorCode = "quota_exceeded"

// FileStore keeps file metadata. Both stores implement it; store/storetest's contract covers it.
type FileStore interface {
	// CreateFile stores f (ID, Owner, Name, SHA256, MediaType and CreatedAt set). A SessionID that
	// names no session is ErrNotFound. When quota > 0 and the owner's files would then total more
	// than quota bytes, nothing is stored and the error has code ECQuota; the check and the insert
	// are one transaction, serialized per owner.
	CreateFile(ctx context.Context, f *File, quota int64) error
	// GetFile returns ErrNotFound for an unknown id.
	GetFile(ctx context.Context, id string) (*File, error)
	// ListSessionFiles returns up to limit files of the session, oldest first, after the file
	// with id afterID ("" from the start).
	ListSessionFiles(ctx context.Context, sessionID, afterID string, limit int) ([]File, error)
	// AttachFile puts a file that belongs to no session into sessionID; a file already in a
	// session keeps it. An unknown file or session is ErrNotFound.
	AttachFile(ctx context.Context, id, sessionID string) error
	// DeleteFile deletes the file's row (not its blob). An unknown id is ErrNotFound.
	DeleteFile(ctx context.Context, id string) error
	// FileBytes totals the sizes of owner's files.
	FileBytes(ctx context.Context, owner string) (int64, error)
	// BlobRefs counts the files whose bytes are the blob sha256.
	BlobRefs(ctx context.Context, sha256 string) (int64, error)
	// InLineage reports whether session ancestorID is sessionID itself or one of its ancestors
	// (forked_from, transitively, at most MaxLineage steps up) of the same owner: whether the
	// files of ancestorID may be referred to from sessionID, whose fork copies refer to them.
	// It is one query; an unknown session is in no lineage (false, no error).
	InLineage(ctx context.Context, sessionID, ancestorID string) (bool, error)
}

// MaxLineage bounds how many forks up FileStore.InLineage looks for an ancestor.
const MaxLineage = 1000

// QuotaExceeded is the error of an upload that does not fit in the quota of an owner whose files
// already take used bytes.
func QuotaExceeded(used, quota int64) *Error {
	return Errorf(ECQuota, "storage quota exceeded: your files take %d of your quota of %d bytes and this file does not fit in the %d left; delete files to make room", used, quota, max(quota-used, 0))
}
