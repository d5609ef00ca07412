package parley

import (
	"context"
	"io"
	"iter"
)

// BlobStore holds file bytes (uploads, generated images), addressed by content: a blob's key is the
// lower-case hex SHA-256 of its bytes. Metadata (owner, name, media type) lives in the Store; a blob
// is only bytes. Implementations: blob/local (a directory, the default) and blob/s3 (S3-compatible
// object storage); blob/blobtest is the contract suite both pass.
//
// Guarantees every implementation gives:
//   - Put streams: memory use is bounded by the implementation's buffer, never by the content size.
//   - A blob is visible under its key only once all its bytes are durably stored; a failed, aborted
//     or crashed Put leaves nothing under a real key (at most a temporary object that the store
//     cleans up).
//   - Putting identical bytes twice, also concurrently, yields one blob under one key.
//   - A missing key is ErrNotFound (errors.Is); a key that is not 64 lower-case hex digits is an
//     ECInvalid error and never touches storage.
type BlobStore interface {
	// Put reads r to EOF and stores its bytes. When limit > 0 and r holds more than limit bytes,
	// Put stops reading after limit+1 bytes, stores nothing and returns an ECTooLarge *Error.
	// When ctx ends or r fails, nothing is stored and the error is returned.
	Put(ctx context.Context, r io.Reader, limit int64) (BlobInfo, error)
	// Open returns a reader of the blob's bytes that can seek, so ranged reads
	// (http.ServeContent) cost only the range. The caller closes it.
	Open(ctx context.Context, key string) (BlobReader, error)
	// Stat returns the blob's key and size without reading it.
	Stat(ctx context.Context, key string) (BlobInfo, error)
	// Delete removes the blob. Deleting a missing blob is ErrNotFound. The caller decides whether
	// a blob is still referenced (garbage collection lives beside the metadata).
	Delete(ctx context.Context, key string) error
	// Keys yields every stored blob (in no particular order) for garbage collection, and stops at
	// the first error, yielding it. Blobs put or deleted during the walk may or may not be seen.
	Keys(ctx context.Context) iter.Seq2[BlobInfo, error]
}

// BlobInfo describes one stored blob.
type BlobInfo struct {
	Key  string // lower-case hex SHA-256 of the bytes
	Size int64  // in bytes
}

// BlobReader reads one blob. Seek positions are byte offsets into the blob.
type BlobReader interface {
	io.ReadSeekCloser
	// Size is the blob's length in bytes.
	Size() int64
}

// ECTooLarge classifies content larger than a limit (413).
const ECTooLarge ErrorCode = "too_large"

// BlobKeyLen is the length of a blob key: hex SHA-256.
const BlobKeyLen = 64

// ValidBlobKey reports whether key has the shape of a blob key (64 lower-case hex digits), so it can
// be used as a file name or object key without any escaping.
func ValidBlobKey(key string) bool {
	if len(key) != BlobKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ErrInvalidBlobKey is returned for a key that is not a blob key.
var ErrInvalidBlobKey = &Error{Code: ECInvalid, Message: "invalid blob key"}

// BlobTooLarge returns the error for content over limit bytes.
func BlobTooLarge(limit int64) *Error {
	return Errorf(ECTooLarge, "the content is larger than the limit of %d bytes", limit)
}
