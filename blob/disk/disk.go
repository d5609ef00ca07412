// Package disk is the default parley.BlobStore: blobs as files in a directory on the local disk.
//
// Layout under the directory given to Open:
//
//	ab/cd/abcd…   one file per blob, named by its SHA-256 (hex), under two levels of shard directories
//	tmp/          uploads in progress: put-* files, removed by Open
//
// A Put streams into a temporary file in tmp/ (same file system, so the rename is atomic), hashing
// as it writes, fsyncs the file, renames it to its final name and fsyncs the shard directory. A crash
// at any point leaves at most a temporary file, never half a blob under a real name.
//
// One process owns a directory: Open removes every temporary file it finds, which would break the
// uploads of a second process using the same directory at the same time.
package disk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"

	"github.com/parleyhq/parley"
)

const tmpDir = "tmp"

// Store is a parley.BlobStore in a directory.
type Store struct {
	dir string
}

var _ parley.BlobStore = (*Store)(nil)

// Open returns the store in dir, creating dir if needed, and removes temporary files that uploads
// interrupted by a crash left behind.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("blob/disk: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob/disk: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(abs, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("blob/disk: %w", err)
	}
	s := &Store{dir: abs}
	if err := s.removeTemp(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) removeTemp() error {
	entries, err := os.ReadDir(filepath.Join(s.dir, tmpDir))
	if err != nil {
		return fmt.Errorf("blob/disk: reading temporary files: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "put-") {
			if err := os.Remove(filepath.Join(s.dir, tmpDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("blob/disk: removing a temporary file: %w", err)
			}
		}
	}
	return nil
}

// path returns the file of a valid key.
func (s *Store) path(key string) string {
	return filepath.Join(s.dir, key[0:2], key[2:4], key)
}

// Put implements parley.BlobStore.
func (s *Store) Put(ctx context.Context, r io.Reader, limit int64) (info parley.BlobInfo, err error) {
	if err := ctx.Err(); err != nil {
		return info, err
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "put-*")
	if err != nil {
		return info, fmt.Errorf("blob/disk: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()

	h := sha256.New()
	src := &ctxReader{ctx: ctx, r: r}
	var in io.Reader = src
	if limit > 0 {
		in = io.LimitReader(src, limit+1)
	}
	buf := make([]byte, 256<<10)
	n, err := io.CopyBuffer(io.MultiWriter(f, h), in, buf)
	if err != nil {
		return info, fmt.Errorf("blob/disk: writing: %w", err)
	}
	if limit > 0 && n > limit {
		return info, parley.BlobTooLarge(limit)
	}
	if err := f.Sync(); err != nil {
		return info, fmt.Errorf("blob/disk: %w", err)
	}
	cerr := f.Close()
	f = nil
	if cerr != nil {
		return info, fmt.Errorf("blob/disk: %w", cerr)
	}

	info = parley.BlobInfo{Key: hex.EncodeToString(h.Sum(nil)), Size: n}
	final := s.path(info.Key)
	if st, serr := os.Stat(final); serr == nil && st.Size() == n {
		// The same bytes are already stored (content addressing): keep that file. Its Put may
		// still be between its rename and its directory fsync, so sync the directory here too
		// before acknowledging.
		os.Remove(tmp)
		if err := syncDir(filepath.Dir(final)); err != nil {
			return info, err
		}
		return info, nil
	}
	if err := s.mkdirShards(info.Key); err != nil {
		return info, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return info, fmt.Errorf("blob/disk: %w", err)
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return info, err
	}
	return info, nil
}

// mkdirShards creates the two shard directories of key, fsyncing each parent whose entries change.
func (s *Store) mkdirShards(key string) error {
	d1 := filepath.Join(s.dir, key[0:2])
	d2 := filepath.Join(d1, key[2:4])
	if _, err := os.Stat(d2); err == nil {
		return nil
	}
	for _, d := range []string{d1, d2} {
		err := os.Mkdir(d, 0o700)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("blob/disk: %w", err)
		}
		if err == nil {
			if err := syncDir(filepath.Dir(d)); err != nil {
				return err
			}
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("blob/disk: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("blob/disk: syncing a directory: %w", err)
	}
	return nil
}

// Open implements parley.BlobStore.
func (s *Store) Open(ctx context.Context, key string) (parley.BlobReader, error) {
	if !parley.ValidBlobKey(key) {
		return nil, parley.ErrInvalidBlobKey
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, mapErr(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, mapErr(err)
	}
	return &file{File: f, size: st.Size()}, nil
}

type file struct {
	*os.File
	size int64
}

func (f *file) Size() int64 { return f.size }

// Stat implements parley.BlobStore.
func (s *Store) Stat(ctx context.Context, key string) (parley.BlobInfo, error) {
	if !parley.ValidBlobKey(key) {
		return parley.BlobInfo{}, parley.ErrInvalidBlobKey
	}
	st, err := os.Stat(s.path(key))
	if err != nil {
		return parley.BlobInfo{}, mapErr(err)
	}
	return parley.BlobInfo{Key: key, Size: st.Size()}, nil
}

// Delete implements parley.BlobStore.
func (s *Store) Delete(ctx context.Context, key string) error {
	if !parley.ValidBlobKey(key) {
		return parley.ErrInvalidBlobKey
	}
	if err := os.Remove(s.path(key)); err != nil {
		return mapErr(err)
	}
	return nil
}

// Keys implements parley.BlobStore. It reads one shard directory at a time.
func (s *Store) Keys(ctx context.Context) iter.Seq2[parley.BlobInfo, error] {
	return func(yield func(parley.BlobInfo, error) bool) {
		err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			rel, rerr := filepath.Rel(s.dir, path)
			if rerr != nil {
				return rerr
			}
			if d.IsDir() {
				if rel == tmpDir {
					return fs.SkipDir
				}
				return nil
			}
			name := d.Name()
			if !parley.ValidBlobKey(name) || rel != filepath.Join(name[0:2], name[2:4], name) {
				return nil // not a blob (a stray file): ignore it
			}
			st, ierr := d.Info()
			if errors.Is(ierr, fs.ErrNotExist) {
				return nil // deleted during the walk
			}
			if ierr != nil {
				return ierr
			}
			if !yield(parley.BlobInfo{Key: name, Size: st.Size()}, nil) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(parley.BlobInfo{}, fmt.Errorf("blob/disk: listing: %w", err))
		}
	}
}

var errStop = errors.New("stop")

func mapErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return parley.ErrNotFound
	}
	return fmt.Errorf("blob/disk: %w", err)
}

// ctxReader fails a read once ctx has ended, so a Put from a slow or stalled source can be abandoned
// between reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
