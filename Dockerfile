# The embedded profile (`switchboard serve`: one SQLite file, no AWS account) as a container
# image. Build and smoke-test it with `scripts/container.sh`; see docs/running.md, "Run it in a container".
#
# The base images are build arguments so that a mirror, or a digest pinned by your registry
# policy, can stand in (e.g. --build-arg RUNTIME_IMAGE=registry.example.com/debian:bookworm-slim).
ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# The registry and target caches survive between builds (BuildKit and Buildah both honour
# them); the binary is copied out of the cache in the same step. COPY keeps the context's
# modification times, which can be older than a cached build of other sources: the workspace's
# own files are touched so that cargo always rebuilds them (dependencies stay cached).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    find crates functions -type f -exec touch {} + \
    && cargo build --profile server --locked -p switchboard-cli \
    && install -m 0755 target/server/switchboard /usr/local/bin/switchboard

FROM ${RUNTIME_IMAGE}
# CA roots for HTTPS to model providers, webhooks and OTLP collectors; a system user that owns
# only the data directory.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin switchboard \
    && install -d -o switchboard -g switchboard -m 0700 /data
COPY --from=build /usr/local/bin/switchboard /usr/local/bin/switchboard
COPY examples /usr/share/switchboard/examples
USER switchboard:switchboard
WORKDIR /data
VOLUME ["/data"]
# Inside the container the server listens on every interface of its own network namespace;
# publish the port on loopback (-p 127.0.0.1:8080:8080) or put TLS in front: keys travel in
# plain HTTP here. Logs are JSON lines on stderr for a log collector.
ENV SWITCHBOARD_DATA_DIR=/data \
    SWITCHBOARD_LISTEN=0.0.0.0:8080 \
    SWITCHBOARD_LOG_FORMAT=json
EXPOSE 8080
# `switchboard ready` asks GET /ready (database writable, workers running); no key needed.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["switchboard", "ready", "--timeout", "4"]
# SIGTERM drains: open requests finish (10 s at most), each worker commits the item in hand
# (bounded by --turn-timeout, 90 s by default); give `docker stop` that long (-t 100).
STOPSIGNAL SIGTERM
ENTRYPOINT ["switchboard"]
CMD ["serve"]
