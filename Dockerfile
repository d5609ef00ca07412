# syntax=docker/dockerfile:1
# Parley in a container: a static binary (pure-Go SQLite, no cgo) on distroless, as a non-root
# user. Build: docker build -t parley . ; run: docker run -p 8080:8080 -v parley-data:/data parley
# (see compose.yaml for PostgreSQL, Redis and two instances behind a proxy).

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer is reused while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# The web UI is embedded from the committed web/dist: no Node needed here.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/parley ./cmd/parley \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/parley /usr/local/bin/parley
# The SQLite file lives on a volume, owned by the image's non-root user (65532).
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
WORKDIR /data
ENV PARLEY_ADDR=0.0.0.0:8080 \
    PARLEY_DB=/data/parley.db \
    PARLEY_LOG_FORMAT=json
EXPOSE 8080
VOLUME ["/data"]
# Distroless has no shell or curl: the binary probes itself (GET /readyz).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/parley", "healthcheck", "--url", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/local/bin/parley"]
CMD ["serve"]
