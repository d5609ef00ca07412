module github.com/parleyhq/parley

go 1.26.8

replace github.com/google/pprof => github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe

require github.com/google/uuid v1.6.0
