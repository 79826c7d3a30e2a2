# Builds the single qiwu-scheduler binary and ships it on a slim base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin qiwu-scheduler

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/qiwu qiwu && mkdir -p /var/lib/qiwu && chown qiwu /var/lib/qiwu
COPY --from=build /src/target/release/qiwu-scheduler /usr/local/bin/qiwu-scheduler
USER qiwu
WORKDIR /var/lib/qiwu
ENV QIWU_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/qiwu-scheduler"]
CMD ["serve"]
