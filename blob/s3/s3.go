// Package s3 is a parley.BlobStore in S3-compatible object storage (AWS S3, MinIO, Ceph RGW, R2,
// …), on github.com/minio/minio-go/v7.
//
// Object layout under the configured prefix:
//
//	blobs/<sha256 hex>   one object per blob
//	tmp/<random>         uploads in progress
//
// The key of a blob is known only after all its bytes have been read, so a Put streams to a
// temporary object (a multipart upload of unknown length: memory is one part, PartSize bytes),
// then copies it server-side to blobs/<hash> (skipped when that blob already exists) and deletes
// the temporary object. A blob object appears only through that copy, which S3 makes atomic, so a
// crash never exposes half a blob under a real key. A crash can leave a temporary object or an
// incomplete multipart upload under tmp/: RemoveStaleTemp removes them, and a bucket lifecycle rule
// ("abort incomplete multipart uploads after 1 day", "expire tmp/ after 1 day") does it without us.
package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/parleyhq/parley"
)

// Config says where the blobs live.
type Config struct {
	Endpoint  string // host[:port], e.g. "s3.amazonaws.com" or "127.0.0.1:9000"
	Bucket    string
	Prefix    string // optional, e.g. "parley/"; a "/" is added when missing
	Region    string // optional
	AccessKey string
	SecretKey string
	Insecure  bool // plain HTTP (a local MinIO); TLS otherwise
	// PartSize is the multipart part size, the memory one upload holds (default 8 MiB, at least
	// 5 MiB, S3's minimum). The largest blob is 10,000 parts.
	PartSize uint64
	// Transport, when set, replaces the HTTP transport (tests).
	Transport http.RoundTripper
}

// DefaultPartSize is the multipart part size when Config.PartSize is 0.
const DefaultPartSize = 8 << 20

const minPartSize = 5 << 20

// smallPut is the largest blob uploaded in a single PUT.
const smallPut = 1 << 20

// maxCopy is the largest object S3 copies in one request.
const maxCopy = 5 << 30

// cleanupTimeout bounds the removal of a temporary object after a Put, which runs even when the
// Put's context has ended.
const cleanupTimeout = 30 * time.Second

// Store is a parley.BlobStore in one bucket.
type Store struct {
	c        *minio.Client
	bucket   string
	prefix   string
	partSize uint64
}

var _ parley.BlobStore = (*Store)(nil)

// Open connects to the bucket and checks that it exists.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("blob/s3: endpoint and bucket are required")
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    !cfg.Insecure,
		Region:    cfg.Region,
		Transport: cfg.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("blob/s3: %w", err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("blob/s3: checking bucket %q: %w", cfg.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("blob/s3: bucket %q does not exist", cfg.Bucket)
	}
	prefix := cfg.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	ps := cfg.PartSize
	if ps == 0 {
		ps = DefaultPartSize
	}
	if ps < minPartSize {
		return nil, fmt.Errorf("blob/s3: part size %d is below S3's minimum of %d", ps, minPartSize)
	}
	return &Store{c: c, bucket: cfg.Bucket, prefix: prefix, partSize: ps}, nil
}

func (s *Store) blobKey(key string) string { return s.prefix + "blobs/" + key }
func (s *Store) tmpPrefix() string         { return s.prefix + "tmp/" }

// Put implements parley.BlobStore.
func (s *Store) Put(ctx context.Context, r io.Reader, limit int64) (parley.BlobInfo, error) {
	if err := ctx.Err(); err != nil {
		return parley.BlobInfo{}, err
	}
	var rnd [16]byte
	rand.Read(rnd[:])
	tmp := s.tmpPrefix() + hex.EncodeToString(rnd[:])
	defer s.removeTemp(ctx, tmp)

	src := &hashingReader{ctx: ctx, r: r, h: sha256.New(), limit: limit}
	opts := minio.PutObjectOptions{
		PartSize:    s.partSize,
		ContentType: "application/octet-stream",
		// The payload is not signed with SHA-256 (chunked signing): minio-go still sends a CRC32C
		// checksum of every part, and TLS protects it in transit. It also spares a second SHA-256
		// pass beside ours.
		DisableContentSha256: true,
	}
	// A blob that fits in smallPut bytes goes up in one PUT of known length (one request instead of
	// three); a larger one as a multipart upload of unknown length, one part in memory at a time.
	head := make([]byte, smallPut)
	n, err := io.ReadFull(src, head)
	switch {
	case src.tooLarge:
		return parley.BlobInfo{}, parley.BlobTooLarge(limit)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		_, err = s.c.PutObject(ctx, s.bucket, tmp, bytes.NewReader(head[:n]), int64(n), opts)
	case err != nil:
		return parley.BlobInfo{}, fmt.Errorf("blob/s3: reading: %w", err)
	default:
		_, err = s.c.PutObject(ctx, s.bucket, tmp, io.MultiReader(bytes.NewReader(head), src), -1, opts)
	}
	if src.tooLarge {
		return parley.BlobInfo{}, parley.BlobTooLarge(limit)
	}
	if err != nil {
		return parley.BlobInfo{}, fmt.Errorf("blob/s3: uploading: %w", err)
	}
	info := parley.BlobInfo{Key: hex.EncodeToString(src.h.Sum(nil)), Size: src.n}
	final := s.blobKey(info.Key)
	if st, err := s.c.StatObject(ctx, s.bucket, final, minio.StatObjectOptions{}); err == nil && st.Size == info.Size {
		return info, nil // already stored (content addressing)
	} else if err != nil && !isNotFound(err) {
		return parley.BlobInfo{}, fmt.Errorf("blob/s3: %w", err)
	}
	// A server-side copy: the object appears whole or not at all. Above 5 GiB, S3's limit for one
	// copy, a multipart copy.
	dst := minio.CopyDestOptions{Bucket: s.bucket, Object: final}
	srcObj := minio.CopySrcOptions{Bucket: s.bucket, Object: tmp}
	if info.Size <= maxCopy {
		_, err = s.c.CopyObject(ctx, dst, srcObj)
	} else {
		_, err = s.c.ComposeObject(ctx, dst, srcObj)
	}
	if err != nil {
		return parley.BlobInfo{}, fmt.Errorf("blob/s3: copying into place: %w", err)
	}
	return info, nil
}

// removeTemp removes a Put's temporary object, also when the Put's context has ended. A failed
// multipart upload is aborted by minio-go itself (also on a cancelled context); one whose abort
// failed is left to RemoveStaleTemp or the bucket's lifecycle rule.
func (s *Store) removeTemp(ctx context.Context, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	s.c.RemoveObject(ctx, s.bucket, tmp, minio.RemoveObjectOptions{})
}

// RemoveStaleTemp removes temporary objects and incomplete uploads older than age that crashed
// Puts left behind. Use an age far longer than any upload takes (an hour): Puts of other instances
// sharing the bucket may be running.
func (s *Store) RemoveStaleTemp(ctx context.Context, age time.Duration) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio's lister goroutines on an early return
	cutoff := time.Now().Add(-age)
	n := 0
	for obj := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.tmpPrefix(), Recursive: true}) {
		if obj.Err != nil {
			return n, fmt.Errorf("blob/s3: listing temporary objects: %w", obj.Err)
		}
		if obj.LastModified.Before(cutoff) {
			if err := s.c.RemoveObject(ctx, s.bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
				return n, fmt.Errorf("blob/s3: %w", err)
			}
			n++
		}
	}
	for up := range s.c.ListIncompleteUploads(ctx, s.bucket, s.tmpPrefix(), true) {
		if up.Err != nil {
			return n, fmt.Errorf("blob/s3: listing incomplete uploads: %w", up.Err)
		}
		if up.Initiated.Before(cutoff) {
			if err := s.c.RemoveIncompleteUpload(ctx, s.bucket, up.Key); err != nil {
				return n, fmt.Errorf("blob/s3: %w", err)
			}
			n++
		}
	}
	return n, nil
}

// hashingReader hashes and counts what it reads, fails once ctx ends, and stops after limit+1
// bytes when limit > 0.
type hashingReader struct {
	ctx      context.Context
	r        io.Reader
	h        hash.Hash
	n        int64
	limit    int64
	tooLarge bool
}

var errTooLarge = errors.New("over the limit")

func (h *hashingReader) Read(p []byte) (int, error) {
	if h.tooLarge {
		return 0, errTooLarge
	}
	if err := h.ctx.Err(); err != nil {
		return 0, err
	}
	if h.limit > 0 && int64(len(p)) > h.limit+1-h.n {
		p = p[:h.limit+1-h.n]
	}
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	if h.limit > 0 && h.n > h.limit {
		h.tooLarge = true
		return n, errTooLarge
	}
	return n, err
}

// Open implements parley.BlobStore. The reader fetches lazily: a Seek followed by a Read costs one
// ranged GET.
func (s *Store) Open(ctx context.Context, key string) (parley.BlobReader, error) {
	if !parley.ValidBlobKey(key) {
		return nil, parley.ErrInvalidBlobKey
	}
	obj, err := s.c.GetObject(ctx, s.bucket, s.blobKey(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, mapErr(err)
	}
	st, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, mapErr(err)
	}
	return &object{Object: obj, size: st.Size}, nil
}

type object struct {
	*minio.Object
	size int64
}

func (o *object) Size() int64 { return o.size }

// Stat implements parley.BlobStore.
func (s *Store) Stat(ctx context.Context, key string) (parley.BlobInfo, error) {
	if !parley.ValidBlobKey(key) {
		return parley.BlobInfo{}, parley.ErrInvalidBlobKey
	}
	st, err := s.c.StatObject(ctx, s.bucket, s.blobKey(key), minio.StatObjectOptions{})
	if err != nil {
		return parley.BlobInfo{}, mapErr(err)
	}
	return parley.BlobInfo{Key: key, Size: st.Size}, nil
}

// Delete implements parley.BlobStore. S3 deletes succeed for missing objects, so Delete asks first:
// a missing blob is ErrNotFound, as in the other stores.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, err := s.Stat(ctx, key); err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, s.blobKey(key), minio.RemoveObjectOptions{}); err != nil {
		return mapErr(err)
	}
	return nil
}

// Keys implements parley.BlobStore, one listing page at a time.
func (s *Store) Keys(ctx context.Context) iter.Seq2[parley.BlobInfo, error] {
	return func(yield func(parley.BlobInfo, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // stops minio's lister goroutine when the caller breaks out early
		prefix := s.blobKey("")
		for obj := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if obj.Err != nil {
				yield(parley.BlobInfo{}, fmt.Errorf("blob/s3: listing: %w", obj.Err))
				return
			}
			key := strings.TrimPrefix(obj.Key, prefix)
			if !parley.ValidBlobKey(key) {
				continue
			}
			if !yield(parley.BlobInfo{Key: key, Size: obj.Size}, nil) {
				return
			}
		}
	}
}

func isNotFound(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.Code == "NoSuchKey" || (resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket")
}

func mapErr(err error) error {
	if isNotFound(err) {
		return parley.ErrNotFound
	}
	return fmt.Errorf("blob/s3: %w", err)
}
