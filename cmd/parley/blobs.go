package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/blob/disk"
	"github.com/parleyhq/parley/blob/s3"
	"github.com/parleyhq/parley/redact"
)

// dataDir is where the server keeps files beside its database: --data-dir, or by default the
// SQLite file's path with ".data" appended (parley.db → parley.db.data/), or "parley-data" in the
// working directory with PostgreSQL.
func (c *config) dataDir() string {
	if c.DataDir != "" {
		return c.DataDir
	}
	if c.DatabaseURL != "" {
		return "parley-data"
	}
	return c.DB + ".data"
}

// openBlobs opens the blob store --blob-store names: the disk under <data dir>/blobs, or an
// S3-compatible bucket, whose credentials come from the environment only (PARLEY_S3_ACCESS_KEY
// and PARLEY_S3_SECRET_KEY, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
func openBlobs(ctx context.Context, c *config, getenv func(string) string, log *slog.Logger) (parley.BlobStore, error) {
	switch c.BlobStore {
	case "", "disk":
		dir := filepath.Join(c.dataDir(), "blobs")
		bs, err := disk.Open(dir)
		if err != nil {
			return nil, err
		}
		log.Info("blob store", "store", "disk", "dir", redact.Safe(bs.Dir()))
		return bs, nil
	case "s3":
		first := func(names ...string) string {
			for _, n := range names {
				if v := getenv(n); v != "" {
					return v
				}
			}
			return ""
		}
		cfg := s3.Config{
			Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: c.S3Prefix, Region: c.S3Region, Insecure: c.S3Insecure,
			AccessKey: first("PARLEY_S3_ACCESS_KEY", "AWS_ACCESS_KEY_ID"),
			SecretKey: first("PARLEY_S3_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"),
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		bs, err := s3.Open(octx, cfg)
		if err != nil {
			return nil, err
		}
		if n, err := bs.RemoveStaleTemp(octx, 24*time.Hour); err != nil {
			log.Warn("blob store: removing stale temporary objects", "err", err)
		} else if n > 0 {
			log.Info("blob store: removed stale temporary objects", "objects", n)
		}
		log.Info("blob store", "store", "s3", "endpoint", c.S3Endpoint, "bucket", c.S3Bucket)
		return bs, nil
	}
	return nil, fmt.Errorf("--blob-store: %q is neither disk nor s3", c.BlobStore)
}
