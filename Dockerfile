# syntax=docker/dockerfile:1
# Builds the single qiwu-scheduler binary (every role: serve, api, worker,
# migrate) and ships it on a slim Debian as a non-root user.
#
# Base images are pinned by exact tag: the builder's Rust is the toolchain
# the project is tested with (rust-version in Cargo.toml is the floor), and
# both stages are Debian 12 so the binary finds the glibc it was linked to.
# Update the tags deliberately, together.

FROM rust:1.95.0-slim-bookworm AS build
WORKDIR /src

# Dependencies first: this layer is rebuilt only when a manifest or the lock
# file changes, not on every source edit. Each workspace crate gets an empty
# stand-in source so cargo can resolve and build everything it depends on.
COPY Cargo.toml Cargo.lock ./
COPY crates/domain/Cargo.toml crates/domain/
COPY crates/storage/Cargo.toml crates/storage/
COPY crates/coord/Cargo.toml crates/coord/
COPY crates/scheduler-worker/Cargo.toml crates/scheduler-worker/
COPY crates/api/Cargo.toml crates/api/
COPY migrations/Cargo.toml migrations/
RUN mkdir -p src benches crates/domain/src crates/storage/src crates/coord/src crates/scheduler-worker/src \
        crates/api/src migrations/src \
    && echo 'fn main() {}' > src/main.rs \
    && echo 'fn main() {}' > benches/fire_lag.rs \
    && touch crates/domain/src/lib.rs crates/storage/src/lib.rs crates/coord/src/lib.rs \
        crates/scheduler-worker/src/lib.rs crates/api/src/lib.rs migrations/src/lib.rs \
    && cargo build --locked --release --bin qiwu-scheduler \
    && rm -rf src benches crates/*/src migrations/src

# The sources. Their files are touched so cargo rebuilds the workspace
# crates over the stand-ins whatever the context's modification times.
COPY . .
RUN find src crates/*/src migrations/src -name '*.rs' -exec touch {} + \
    && cargo build --locked --release --bin qiwu-scheduler \
    && cp target/release/qiwu-scheduler /usr/local/bin/qiwu-scheduler

FROM debian:12.12-slim

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="qiwu-scheduler" \
      org.opencontainers.image.description="Qiwu Scheduler: scheduled jobs for the Qiwu admin platform (serve, api, worker, migrate)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/debian:12.12-slim"

# CA certificates for https:// webhooks and remote handlers; tzdata for
# QIWU_TIMEZONE and job zones given as the system's zone. Both take the
# newest Debian 12 package on purpose: zone rules and trusted roots must be
# current, and Debian removes superseded versions, so a version pin would
# only break the build.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 qiwu \
    && useradd --system --uid 10001 --gid qiwu --home-dir /var/lib/qiwu --shell /usr/sbin/nologin qiwu \
    && mkdir -p /var/lib/qiwu \
    && chown qiwu:qiwu /var/lib/qiwu

COPY --from=build /usr/local/bin/qiwu-scheduler /usr/local/bin/qiwu-scheduler

# A numeric user, so Kubernetes' runAsNonRoot can check it.
USER 10001:10001
WORKDIR /var/lib/qiwu
ENV QIWU_LISTEN=0.0.0.0:8080
EXPOSE 8080
# SIGTERM stops handlers and waits at most 10 s (give the runtime longer).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/qiwu-scheduler", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/qiwu-scheduler"]
CMD ["serve"]
